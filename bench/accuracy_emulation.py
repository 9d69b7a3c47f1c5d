"""What the CUDA backend's number formats cost in accuracy, emulated in numpy: the exact reference
run on the accuracy cases of issue 4 (tests/support/accuracy_cases.py) against the same reference
with the backend's roundings put in, one source or several:

- `kv`: every key and value rounded through q8_0 before it joins the cache, as the pool stores
  them (an f32 model's only source: its products are exact f32 on the GPU);
- `f16`: product operands rounded to f16 once (activations, and each dequantized weight), the
  best any engine with f16 tensor-core operands can do;
- `gpu`: the activations in f16 and the weights as quant.cuh dequantizes them: Q4_K/Q5_K as
  f16(d*sc*q + Mhi) + Mlo, Mhi + Mlo = -dmin*m as an f16 pair (`_gpu_k4`; before, as
  f16(q * f16(d*sc) - f16(dmin*m)), whose f16 scale products put an error of the
  size of the min term's last bit into every weight of a sub-block), Q6_K as
  f16(q * f16(d*sc)), Q8_0 as f16(q * d);
- `int`: the products of quantized weights on integer dot products (bench/int_dot_probe.cu):
  each 32-element block of the activations as two int8 planes, x ~= slo * (254 h + l) with
  slo = max|x| / (127 * 254), the weights exact (their codes times the planes sum exactly in
  int32; scales apply in f32); `int8`: one plane, x ~= s * h (llama.cpp's q8_1 way); `int256`:
  `int`'s two planes with one scale per 256-element super-block, as the one-row integer kernels
  of bench/tma_probe.cu (`rows_i8m`, v35g) take them; `int10`: one plane of integers up to 511
  per 32 elements (exact as f16 mma operands, and 32 codes times their 6-bit scales times such a
  plane sum below 2^24: one f16 mma chain per sub-block instead of `int`'s two planes, v47);
- `state16` / `statebf16`: the DeltaNet recurrent state rounded to f16 / bf16 after every row,
  as a kernel would have to round it to keep a token's bits independent of how its prompt was
  chunked (bench/NOTES.md v45: the state's traffic is most of DeltaNet's cost at many slots).

F32 weights (every weight of the f32 mix; the DeltaNet alpha and beta projections of every mix)
keep exact products, as mm_f32_exact gives them, and the token embedding stays exact (the GPU
gathers its rows in f32). Printed after 4, 10, 20 and all prompts, to
show how far a small sample's figure can sit from the whole one. CPU only, seconds per mix.

    python bench/accuracy_emulation.py --mix q4_k_m --sources kv,gpu
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine import (
    quants,
    reference,
    reference_attention,
    reference_deltanet,
    reference_ops,
    reference_state,
)
from engine.gguf_file import open_gguf
from engine.reference import ReferenceModel
from tests.support import accuracy_cases as cases

REPORT_AFTER = (4, 10, 20)
SOURCES = ("kv", "f16", "gpu", "int", "int8", "int10", "int256", "state16", "statebf16")
# the integer sources: (planes, elements per scale, largest magnitude of the first plane)
INT_SOURCES = {
    "int": (2, 32, 127),
    "int8": (1, 32, 127),
    "int10": (1, 32, 511),
    "int256": (2, 256, 127),
}
PRODUCT_SOURCES = {"f16", "gpu", *INT_SOURCES}  # at most one: each replaces the products


def q8_0_round_trip(values: np.ndarray) -> np.ndarray:
    """values as a q8_0 pool returns them (blocks of 32 along the last axis: the head dim)."""
    flat = np.ascontiguousarray(values, np.float32).reshape(-1)
    back = quants.dequantize(quants.quantize(flat, quants.Q8_0), quants.Q8_0, flat.shape)
    return np.asarray(back, np.float32).reshape(values.shape)


def _f16(values: np.ndarray) -> np.ndarray:
    """Rounded to the nearest f16 (from f64, so one rounding), as f64."""
    return np.asarray(values, np.float64).astype(np.float16).astype(np.float64)


def _gpu_k4(blocks: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Q4_K/Q5_K codes q [n, 8, 32] of blocks, as the fragments build each weight: the exact
    d*sc*q plus Mhi = f16(-dmin*m), rounded to f16, plus Mlo = f16(-dmin*m - Mhi)."""
    n = blocks.shape[0]
    d = quants._f16(blocks[:, 0:2]).astype(np.float64).reshape(n, 1, 1)
    dmin = quants._f16(blocks[:, 2:4]).astype(np.float64).reshape(n, 1, 1)
    sc, mn = (v.reshape(n, 8, 1).astype(np.float64) for v in quants.unpack_scale_min_k4(blocks[:, 4:16]))  # fmt: skip
    m_hi = _f16(-dmin * mn)
    m_lo = _f16(-dmin * mn - m_hi)
    return _f16(_f16(d * sc * q + m_hi) + m_lo).reshape(-1, quants.QK_K)


def _gpu_q4_k(blocks: np.ndarray) -> np.ndarray:
    """Q4_K blocks as FragQ4K dequantizes them."""
    return _gpu_k4(blocks, quants._nibbles(blocks[:, 16:144]).astype(np.float64))


def _gpu_q5_k(blocks: np.ndarray) -> np.ndarray:
    """Q5_K blocks as FragQ5K dequantizes them (the fifth bit from qh)."""
    n = blocks.shape[0]
    qh = blocks[:, 16:48].reshape(n, 1, 32) >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)
    q = quants._nibbles(blocks[:, 48:176]) | ((qh & 0x01) << 4)
    return _gpu_k4(blocks, q.astype(np.float64))


def _gpu_q6_k(blocks: np.ndarray) -> np.ndarray:
    """Q6_K blocks as FragQ6K dequantizes them: f16(code * f16(d*sc))."""
    mult, q = quants.q6_k_parts(blocks)
    return _f16(q * _f16(mult)).reshape(-1, quants.QK_K)


def _gpu_q8_0(blocks: np.ndarray) -> np.ndarray:
    """Q8_0 blocks as FragQ8_0 dequantizes them: f16(q * d), one rounding."""
    return _f16(quants._deq_q8_0(blocks))


def _once_f16(kind: int) -> Callable[[np.ndarray], np.ndarray]:
    """The exact dequantizer of `kind`, each weight then rounded to f16 once."""
    exact = quants._DEQUANT_BLOCKS[kind]
    return lambda blocks: _f16(exact(blocks))


def dequantized_as(source: str) -> Any:
    """A context in which quantized weights dequantize as `source` ("f16" or "gpu") says."""
    table = quants._DEQUANT_BLOCKS
    patch: dict[int, Callable[[np.ndarray], np.ndarray]]
    if source == "gpu":
        patch = {quants.Q4_K: _gpu_q4_k, quants.Q5_K: _gpu_q5_k, quants.Q6_K: _gpu_q6_k,
                 quants.Q8_0: _gpu_q8_0}  # fmt: skip
    else:
        patch = {kind: _once_f16(kind) for kind in table}
    return mock.patch.dict(table, patch)


def f16_activations() -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """reference_ops.linear with the activations rounded to f16, except for the weights kept
    in f32 (those whose values are not all f16 numbers: the f32 tensors)."""
    f16_weights: dict[int, bool] = {}

    def linear(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
        key = id(weight)
        if key not in f16_weights:
            f16_weights[key] = bool(np.array_equal(weight, weight.astype(np.float16)))
        if f16_weights[key]:
            x = x.astype(np.float16).astype(np.float32)
        return reference_ops.linear(x, weight)

    return linear


def int_planes(x: np.ndarray, planes: int, block: int = 32, top: int = 127) -> np.ndarray:
    """x with each `block`-element block along the last axis rounded as `planes` integer planes
    say: the first of magnitude up to `top`, the second (int8) of what the first left over."""
    blocks = np.asarray(x, np.float64).reshape(*x.shape[:-1], x.shape[-1] // block, block)
    s = np.abs(blocks).max(-1, keepdims=True) / float(top)
    s = np.where(s == 0, 1.0, s)
    h = np.clip(np.round(blocks / s), -top, top)
    if planes == 1:
        return (s * h).reshape(x.shape).astype(np.float32)
    slo = s / 254.0
    low = np.clip(np.round((blocks - s * h) / slo), -127, 127)
    return (slo * (254.0 * h + low)).reshape(x.shape).astype(np.float32)


def _bf16(values: np.ndarray) -> np.ndarray:
    """f32 values rounded to the nearest bf16 (ties to even, as the GGUF writer rounds), as f32."""
    bits = quants._to_bf16(np.ascontiguousarray(values, np.float32))
    return (bits.astype(np.uint32) << 16).view(np.float32)


def state_rounded_per_row(rounding: Callable[[np.ndarray], np.ndarray]) -> Any:
    """A context in which the delta rule stores its state through `rounding` after every row."""
    exact = reference_deltanet.delta_rule

    def delta_rule(q: np.ndarray, k: np.ndarray, v: np.ndarray, beta: np.ndarray, gamma: np.ndarray, state: np.ndarray, shape: Any) -> np.ndarray:  # fmt: skip
        out = []
        for t in range(q.shape[0]):
            rows = slice(t, t + 1)
            out.append(exact(q[rows], k[rows], v[rows], beta[rows], gamma[rows], state, shape))
            state[...] = rounding(state)
        return np.concatenate(out)

    return mock.patch.object(reference_deltanet, "delta_rule", delta_rule)


STATE_ROUNDINGS = {
    "state16": lambda s: _f16(s).astype(np.float32),
    "statebf16": _bf16,
}


@contextmanager
def quantized_weights_recorded() -> Iterator[set[int]]:
    """Within the block, the ids of the float32 arrays the quantized tensors dequantize to (the
    reference keeps those very arrays as its weights)."""
    ids: set[int] = set()
    exact = quants.dequantize

    def dequantize(data: np.ndarray, ggml_type: int, shape: Any) -> np.ndarray:
        out = exact(data, ggml_type, shape)
        if ggml_type in quants._DEQUANT_BLOCKS:
            ids.add(id(out))
        return out

    with mock.patch.object(quants, "dequantize", dequantize):
        yield ids


def int_activations(quantized: set[int], planes: int, block: int = 32, top: int = 127) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:  # fmt: skip
    """reference_ops.linear with the activations of quantized weights' products as integer planes."""

    def linear(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
        if id(weight) in quantized:
            x = int_planes(x, planes, block, top)
        return reference_ops.linear(x, weight)

    return linear


@contextmanager
def emulated(sources: set[str], linear: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Iterator[None]:  # fmt: skip
    """Within the block, the reference computes with the roundings of `sources`."""
    with ExitStack() as stack:
        if "kv" in sources:
            exact_append = reference_state.KVCache.append

            def append(self: reference_state.KVCache, keys: np.ndarray, values: np.ndarray) -> None:  # fmt: skip
                exact_append(self, q8_0_round_trip(keys), q8_0_round_trip(values))

            stack.enter_context(mock.patch.object(reference_state.KVCache, "append", append))
        if sources & PRODUCT_SOURCES:
            for module in (reference, reference_attention, reference_deltanet):
                stack.enter_context(mock.patch.object(module, "linear", linear))
        for name in sources & set(STATE_ROUNDINGS):
            stack.enter_context(state_rounded_per_row(STATE_ROUNDINGS[name]))
        yield


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mix", default="f32", choices=cases.MIXES)
    parser.add_argument("--prompts", type=int, default=cases.N_PROMPTS)
    parser.add_argument("--sources", default="kv", help=f"comma-separated, of {SOURCES}")
    args = parser.parse_args()
    sources = set(args.sources.split(","))
    if not sources <= set(SOURCES) or len(sources & PRODUCT_SOURCES) > 1:
        parser.error(f"--sources: some of {SOURCES}, at most one of {sorted(PRODUCT_SOURCES)}")
    with tempfile.TemporaryDirectory() as folder:
        path = cases.write_models(Path(folder), (args.mix,))[args.mix]
        exact_model = ReferenceModel(open_gguf(path))
        weights = sources & {"f16", "gpu"}
        with dequantized_as(weights.pop()) if weights else nullcontext(), quantized_weights_recorded() as quantized:  # fmt: skip
            model = ReferenceModel(open_gguf(path))
    # the embedding rows are gathered in f32 on the GPU (embed_rows), not through the products
    model.weights = replace(model.weights, embed=exact_model.weights.embed)
    linear = f16_activations()
    for name in sources & set(INT_SOURCES):
        linear = int_activations(quantized, *INT_SOURCES[name])
    agree: list[np.ndarray] = []
    kl: list[np.ndarray] = []
    for i in range(args.prompts):
        tokens = cases.prompt(i + 1, cases.PROMPT_LENGTH, model.n_vocab)
        exact = exact_model.forward(exact_model.new_state(), tokens).logits
        with emulated(sources, linear):
            rounded = model.forward(model.new_state(), tokens).logits
        kl.append(reference_ops.kl_rows(exact, rounded))
        agree.append(np.argmax(exact, -1) == np.argmax(rounded, -1))
        if i + 1 in REPORT_AFTER or i + 1 == args.prompts:
            a = np.concatenate(agree)
            print(
                f"{args.mix}, {args.sources}, {i + 1} prompts ({a.size} positions): "
                f"top-1 {100 * a.mean():.2f} % ({int((~a).sum())} flips), "
                f"mean KL {np.concatenate(kl).mean():.2e}"
            )


if __name__ == "__main__":
    main()
