"""The whole-model accuracy cases (issue 4 item 3), defined once for the two tests that use them.

tests/gpu/test_cuda_backend.py measures the CUDA backend against the exact numpy reference
(engine/reference.py) on these cases; tests/integration/test_llamacpp_quantized_accuracy.py
measures llama.cpp's own quantized path on the same files and the first LLAMACPP_PROMPTS prompts
and keeps its figures in LLAMACPP_FIGURES, which the GPU test reads as the bar to beat on those
positions (the GPU machine has no llama.cpp build). Changing those cases invalidates the stored
figures: rerun the integration test with OPENJET_UPDATE_ACCURACY=1.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.synthetic import write_synthetic

PRESET = "tiny"
MODEL_SEED = 3
MIXES = ("f32", "q8_0", "q4_k_m", "mixed")
QUANTIZED_MIXES = ("q8_0", "q4_k_m", "mixed")
# 40 prompts of 120 tokens: 4,800 positions, so one top-1 flip is 0.02 % and the 99.5 %
# bar is 24 flips. With the first 4 prompts alone (480 positions, one flip 0.21 %) a numpy
# emulation of the q8_0 KV pool on the exact reference, and nothing else, gives 99.38 % on the
# f32 model (3 flips at near-ties) and 99.81 % over these 40 (bench/accuracy_emulation.py): the
# smaller sample could not tell an engine at 99.5 % from one at 99.8 %, and it read the CUDA
# backend's q4_k_m and mixed models at 99.58 % where 4,800 positions give 99.48 % and 99.27 %
# (bench/NOTES.md v22c).
N_PROMPTS = 40
# llama.cpp's figures cover the first 4 (its oracle asks one request per position: over a
# minute per 480 positions and mix on a 2-core machine); at 88-95 % top-1 they sit far below
# ours at any sample size, so the comparison needs no more
LLAMACPP_PROMPTS = 4
PROMPT_LENGTH = 120
SLOTS = 4  # the GPU test's backend slots, each reset before its next prompt
CHUNK = 40  # the GPU test prefills each prompt in chunks of this many tokens
LLAMACPP_FIGURES = Path(__file__).resolve().parents[1] / "data" / "llamacpp_quantized_path.json"


def prompt(seed: int, n: int, vocab: int) -> tuple[int, ...]:
    """n random token ids in [0, vocab), deterministic in seed."""
    return tuple(int(t) for t in np.random.default_rng(seed).integers(0, vocab, n))


def prompts(n_vocab: int, count: int = N_PROMPTS) -> list[tuple[int, ...]]:
    """The first `count` accuracy prompts, in the order the GPU test prefills them (slot i %
    SLOTS); each holds PROMPT_LENGTH positions."""
    return [prompt(i + 1, PROMPT_LENGTH, n_vocab) for i in range(count)]


def chunks(tokens: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The prefill chunks of one prompt, in order."""
    return [tokens[i : i + CHUNK] for i in range(0, len(tokens), CHUNK)]


def model_path(folder: Path, mix: str) -> Path:
    return folder / f"{PRESET}-{mix}-seed{MODEL_SEED}.gguf"


def write_models(folder: Path, mixes: tuple[str, ...] = MIXES) -> dict[str, Path]:
    """Write the synthetic model of each mix into folder -> {mix: path}."""
    folder.mkdir(parents=True, exist_ok=True)
    return {mix: write_synthetic(model_path(folder, mix), PRESET, mix, MODEL_SEED) for mix in mixes}


def case_description() -> dict[str, Any]:
    """What the stored figures were measured on; a stored copy that differs is stale."""
    return {
        "preset": PRESET,
        "model_seed": MODEL_SEED,
        "prompt_seeds": [i + 1 for i in range(LLAMACPP_PROMPTS)],
        "prompt_length": PROMPT_LENGTH,
    }


@dataclass(frozen=True)
class Figures:
    """A candidate's distributions against the exact reference over all prompt positions."""

    positions: int
    top1: float  # fraction of positions whose argmax is the exact one
    mean_kl: float  # mean KL(exact ‖ candidate), nats

    def __str__(self) -> str:
        return f"top-1 {100 * self.top1:.2f} %, mean KL {self.mean_kl:.3e} ({self.positions} pos)"


def load_llamacpp_figures(path: Path = LLAMACPP_FIGURES) -> dict[str, Any]:
    """The stored document: how and when it was measured, and {"mixes": {mix: Figures}}."""
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing: run tests/integration/test_llamacpp_quantized_accuracy.py "
            "with OPENJET_UPDATE_ACCURACY=1"
        )
    document: dict[str, Any] = json.loads(path.read_text())
    return document


def llamacpp_figures(mix: str, path: Path = LLAMACPP_FIGURES) -> Figures:
    """llama.cpp's stored figures for one quantized mix."""
    return Figures(**load_llamacpp_figures(path)["mixes"][mix])


def store_llamacpp_figures(
    mix: str,
    figures: Figures,
    *,
    version: str,
    date: str,
    server_args: list[str],
    path: Path = LLAMACPP_FIGURES,
) -> None:
    """Write one mix's figures into the stored document, keeping the other mixes' figures
    unless they were measured on other cases."""
    old = load_llamacpp_figures(path) if path.exists() else {}
    mixes = old["mixes"] if old.get("cases") == case_description() else {}
    mixes[mix] = asdict(figures)
    document = {
        "what": "llama.cpp's own quantized path (CPU llama-server) vs the exact reference",
        "llama_cpp_version": version,
        "measured_on": date,
        "server_args": server_args,
        "cases": case_description(),
        "mixes": dict(sorted(mixes.items())),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n")
