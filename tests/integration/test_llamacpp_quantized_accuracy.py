"""llama.cpp's own quantized path against the exact result: the bar for the CUDA backend (issue 4
item 3 asks our whole-model logits to be closer to engine/reference.py than llama.cpp's are).

For each quantized mix of tests/support/accuracy_cases.py, the CPU llama-server runs the quantized
file itself (its quantized dot products round activations to 8 bits), and its distribution at
every position of the accuracy prompts is compared with the reference's exact logits on the same
file. The figures are stored in tests/data/llamacpp_quantized_path.json, which the GPU test reads
(the GPU machine has no llama.cpp). This test fails when the measured figures leave the stored
ones (a llama.cpp upgrade or a changed case); OPENJET_UPDATE_ACCURACY=1 rewrites them instead.
"""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from engine.gguf_file import open_gguf
from engine.llama_server import LLAMA_CPP_VERSION, LlamaServer
from engine.reference import ReferenceModel
from tests.integration.llamacpp_oracle import Oracle, agreement
from tests.support import accuracy_cases as cases

pytestmark = pytest.mark.slow
LlamaServerFactory = Callable[..., LlamaServer]

# As the own-path measurement in test_reference_llamacpp.py: f32 attention and KV, so the only
# approximation left is llama.cpp's quantized matrix products. One thread: ggml's spinning thread
# pool slows down 20x on a busy 2-core machine.
SERVER_ARGS = [
    *["-fa", "off", "-ctk", "f32", "-ctv", "f32"],
    *["-c", "4096", "-np", "1", "-t", "1", "--no-warmup"],
]
# llama-server is built with -march=native, so its summation order follows the CPU's vector
# units. Its 8-bit activations leave many near ties on these random models, and a build on
# another CPU flips some of them. The figures stored on 2026-11-29 came from another machine's
# build. A build on an AVX-512 Xeon without BF16 (2026-12-07) measured 1.04 and 0.83 points of
# top-1 away from them on q4_k_m and mixed (5 and 4 of 480 positions), and 0.4-2.2 % away in
# mean KL. Two points of top-1 hold such flips. A changed quantization in llama.cpp would move
# the KL by far more than 10 %. The GPU test's bar lies 4-11 points of top-1 and over 200x in
# mean KL from the engine's figures, so this width cannot change the GPU test's outcome.
TOP1_TOLERANCE = 0.02  # two points of top-1
KL_TOLERANCE = 0.10  # relative
UPDATE = os.environ.get("OPENJET_UPDATE_ACCURACY") == "1"


def measure(path: Path, server: LlamaServer) -> cases.Figures:
    """llama.cpp's rows at every prompt position vs the reference's exact logits, pooled."""
    model = ReferenceModel(open_gguf(path))
    oracle = Oracle(server.base_url, model.n_vocab)
    exact, theirs = [], []
    for tokens in cases.prompts(model.n_vocab, cases.LLAMACPP_PROMPTS):
        exact.append(model.forward(model.new_state(), tokens).logits)
        theirs.append(oracle.prompt_rows(tokens))
    # oracle = the exact result, candidate = llama.cpp: KL(exact ‖ llama.cpp), as the GPU test
    result = agreement(np.concatenate(exact), np.concatenate(theirs))
    return cases.Figures(result.positions, result.top1, result.mean_kl)


def differences(measured: cases.Figures, stored: cases.Figures) -> list[str]:
    problems = []
    if measured.positions != stored.positions:
        problems.append(f"{measured.positions} positions, stored {stored.positions}")
    if abs(measured.top1 - stored.top1) > TOP1_TOLERANCE:
        problems.append(f"top-1 off by more than {100 * TOP1_TOLERANCE} points")
    if abs(measured.mean_kl - stored.mean_kl) > KL_TOLERANCE * stored.mean_kl:
        problems.append(f"mean KL off by more than {100 * KL_TOLERANCE:.0f} %")
    return problems


@pytest.mark.parametrize("mix", cases.QUANTIZED_MIXES)
def test_llamacpp_quantized_path_matches_the_stored_figures(
    mix: str, tmp_path: Path, llama_server: LlamaServerFactory
) -> None:
    started = time.perf_counter()
    path = cases.write_models(tmp_path, (mix,))[mix]
    with llama_server(path, extra_args=SERVER_ARGS) as server:
        measured = measure(path, server)
    print(f"\n[{mix}] llama.cpp {LLAMA_CPP_VERSION} quantized path vs exact: {measured}")
    print(f"[{mix}] wall time {time.perf_counter() - started:.1f} s")
    if UPDATE:
        today = datetime.datetime.now(datetime.UTC).date().isoformat()
        cases.store_llamacpp_figures(
            mix, measured, version=LLAMA_CPP_VERSION, date=today, server_args=SERVER_ARGS
        )
        print(f"[{mix}] stored in {cases.LLAMACPP_FIGURES}")
        return
    document = cases.load_llamacpp_figures()
    assert document["cases"] == cases.case_description(), (
        "the accuracy cases changed since the figures were stored: "
        "rerun with OPENJET_UPDATE_ACCURACY=1"
    )
    stored = cases.llamacpp_figures(mix)
    print(f"[{mix}] stored (llama.cpp {document['llama_cpp_version']}): {stored}")
    problems = differences(measured, stored)
    assert not problems, f"{mix}: {'; '.join(problems)} (measured {measured}, stored {stored})"
