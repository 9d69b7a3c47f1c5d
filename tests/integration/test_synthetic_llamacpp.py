"""llama.cpp loads and runs OpenJet's synthetic qwen35 GGUFs, in every quant mix, MTP head included.

For each mix of the tiny preset: llama-server starts on the file, reports the model's shape,
and greedily generates tokens whose distributions are peaked (the weight scaling works in
llama.cpp's own arithmetic, not only in ours). With MTP speculation on (`--spec-type draft-mtp`)
llama-server drafts with the file's nextn block and still produces the same greedy tokens.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from engine.synthetic import PRESETS, write_synthetic

pytestmark = pytest.mark.slow

SERVER_ARGS = ["-c", "512", "-np", "1", "-t", "2", "--no-warmup"]
N_PREDICT = 24


def _prompt(n_vocab: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(5).integers(0, n_vocab - 300, 12)]


def _complete(base_url: str, prompt: list[int]) -> dict[str, Any]:
    body = {
        "prompt": prompt,
        "n_predict": N_PREDICT,
        "temperature": 0.0,
        "n_probs": 1,
        "post_sampling_probs": False,
        "ignore_eos": True,
        "return_tokens": True,
        "cache_prompt": False,
    }
    response = httpx.post(f"{base_url}/completion", json=body, timeout=120)
    response.raise_for_status()
    result: dict[str, Any] = response.json()
    return result


def _model_meta(base_url: str) -> dict[str, Any]:
    models = httpx.get(f"{base_url}/v1/models", timeout=30).json()
    meta: dict[str, Any] = models["data"][0]["meta"]
    return meta


@pytest.mark.parametrize("quant", ["f32", "f16", "bf16", "q8_0", "q4_k_m", "mixed"])
def test_llamacpp_runs_synthetic_tiny(
    quant: str, tmp_path: Path, llama_server: Callable[..., Any]
) -> None:
    preset = PRESETS["tiny"]
    path = write_synthetic(tmp_path / f"tiny-{quant}.gguf", "tiny", quant, seed=0)
    with llama_server(path, extra_args=SERVER_ARGS) as server:
        meta = _model_meta(server.base_url)
        result = _complete(server.base_url, _prompt(preset.n_vocab))
    assert (meta["n_vocab"], meta["n_embd"]) == (preset.n_vocab, preset.n_embd)
    assert len(result["tokens"]) == N_PREDICT
    top1 = [math.exp(p["top_logprobs"][0]["logprob"]) for p in result["completion_probabilities"]]
    assert all(0.0 < p <= 1.0 for p in top1)
    print(
        f"\n{quant}: greedy {result['tokens'][:8]}..., median top-1 probability {np.median(top1):.2f}"
    )
    assert np.median(top1) > 0.3, top1


def test_llamacpp_drafts_with_the_mtp_block(
    tmp_path: Path, llama_server: Callable[..., Any]
) -> None:
    path = write_synthetic(tmp_path / "tiny-mtp.gguf", "tiny", "f32", seed=1)
    prompt = _prompt(PRESETS["tiny"].n_vocab)
    with llama_server(path, extra_args=SERVER_ARGS) as server:
        plain = _complete(server.base_url, prompt)
    spec_args = [*SERVER_ARGS, "--spec-type", "draft-mtp", "--spec-draft-n-max", "3"]
    with llama_server(path, extra_args=spec_args) as server:
        drafted = _complete(server.base_url, prompt)
    timings = drafted["timings"]
    print(
        f"\nMTP drafts: {timings.get('draft_n')} proposed, {timings.get('draft_n_accepted')} accepted"
    )
    assert drafted["tokens"] == plain["tokens"]
    assert timings.get("draft_n", 0) > 0
