"""Random tensor contents for synthetic `qwen35` GGUFs, produced in bounded row chunks.

Each tensor has an *init kind* (how its values are distributed, chosen so a random model stays
numerically sane: projections ~ N(0, 1/fan_in), norm weights ~ 1, DeltaNet decay parameters in
the ranges Hugging Face initialises them to) and is produced chunk by chunk, each chunk from its
own seeded generator, so writing a 17 GB file needs little memory and chunks can be computed in
parallel threads. Two ways to fill a quantized tensor:

- `float` path: draw float32 values and encode them with `engine.quants.quantize` (tiny and small
  presets: the dequantized file is then the same model up to quantization error);
- `blocks` path: draw valid quant blocks directly (random codes, scales chosen to give the
  target standard deviation) — this runs at disk speed for the 27B shape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from engine import quants

CHUNK_VALUES = 1 << 22  # values per generated chunk (16 MiB as float32)


@dataclass(frozen=True)
class WeightSpec:
    """One tensor to write: GGUF name, numpy shape (rows, cols) or (n,), init kind, scale."""

    name: str
    shape: tuple[int, ...]
    kind: str  # "normal", "norm", "ssm_a", "dt_bias"
    std: float = 1.0

    @property
    def rows(self) -> int:
        return int(np.prod(self.shape[:-1], dtype=np.int64)) if len(self.shape) > 1 else 1

    @property
    def cols(self) -> int:
        return int(self.shape[-1])


def chunk_rows(spec: WeightSpec) -> int:
    """Rows per chunk: about CHUNK_VALUES values, at least one row."""
    return max(1, CHUNK_VALUES // spec.cols)


def n_chunks(spec: WeightSpec) -> int:
    return -(-spec.rows // chunk_rows(spec))


def chunk_generator(seed: int, tensor_index: int, chunk: int) -> np.random.Generator:
    """A generator that depends only on (seed, tensor, chunk): chunks can be made in any order."""
    return np.random.default_rng([seed, tensor_index, chunk])


def float_values(spec: WeightSpec, rng: np.random.Generator, n_rows: int) -> np.ndarray:
    """float32 [n_rows, cols] drawn for the tensor's init kind."""
    size = (n_rows, spec.cols)
    if spec.kind == "normal":
        return rng.standard_normal(size, dtype=np.float32) * np.float32(spec.std)
    if spec.kind == "norm":
        # +1 already folded in, as llama.cpp's converter stores RMSNorm weights
        return 1.0 + rng.standard_normal(size, dtype=np.float32) * np.float32(spec.std)
    if spec.kind == "ssm_a":
        # ssm_a = -exp(A_log) with A_log = log(U(1, 16)) (the HF initialisation)
        return -rng.uniform(1.0, 16.0, size).astype(np.float32)
    if spec.kind == "dt_bias":
        # inverse softplus of dt ~ logU(1e-3, 1e-1), the HF initialisation of dt_bias
        dt = np.exp(rng.uniform(math.log(1e-3), math.log(1e-1), size))
        return (dt + np.log(-np.expm1(-dt))).astype(np.float32)
    raise ValueError(f"unknown init kind {spec.kind!r} for {spec.name}")


# --- random quant blocks (the 27B path) ------------------------------------------------------


def _fp16_column(values: np.ndarray) -> np.ndarray:
    return values.astype("<f2").reshape(-1, 1).view(np.uint8)


def _random_k4_header(rng: np.random.Generator, n: int, std: float, levels: int) -> np.ndarray:
    """d, dmin, packed scales of n Q4_K/Q5_K blocks whose values are centred with std `std`.

    With mn = sc and dmin = d*(levels-1)/2 every value is d*sc*(q - (levels-1)/2)."""
    sc = rng.integers(32, 64, size=(n, 8), dtype=np.uint8)
    code_std = math.sqrt((levels * levels - 1) / 12.0)
    d = np.full(n, std / (code_std * 47.5), dtype=np.float32)
    dmin = d * np.float32((levels - 1) / 2)
    return np.concatenate(
        [_fp16_column(d), _fp16_column(dmin), quants.pack_scale_min_k4(sc, sc)], axis=1
    )


def random_blocks(
    ggml_type: int, rng: np.random.Generator, n_values: int, std: float
) -> np.ndarray:
    """uint8 bytes of n_values // block_size random, valid blocks of `ggml_type` (std ~ `std`)."""
    fmt = quants.block_format(ggml_type)
    n = n_values // fmt.block_size
    if ggml_type == quants.Q4_K:
        codes = rng.integers(0, 256, size=(n, 128), dtype=np.uint8)
        return np.concatenate([_random_k4_header(rng, n, std, 16), codes], axis=1)
    if ggml_type == quants.Q5_K:
        codes = rng.integers(0, 256, size=(n, 160), dtype=np.uint8)
        return np.concatenate([_random_k4_header(rng, n, std, 32), codes], axis=1)
    if ggml_type == quants.Q6_K:
        codes = rng.integers(0, 256, size=(n, 192), dtype=np.uint8)
        scales = rng.integers(48, 128, size=(n, 16), dtype=np.int8).view(np.uint8)
        d = np.full(n, std / (18.47 * 87.5), dtype=np.float32)
        return np.concatenate([codes, scales, _fp16_column(d)], axis=1)
    if ggml_type == quants.Q8_0:
        q = rng.integers(-127, 128, size=(n, 32), dtype=np.int8).view(np.uint8)
        d = np.full(n, std / 73.6, dtype=np.float32)
        return np.concatenate([_fp16_column(d), q], axis=1)
    raise quants.QuantError(f"no random-block generator for {fmt.name}")


def make_chunk(
    spec: WeightSpec, ggml_type: int, seed: int, index: int, chunk: int, blocks: bool
) -> np.ndarray:
    """Bytes (uint8, one row per tensor row) of chunk `chunk` of tensor number `index`."""
    rng = chunk_generator(seed, index, chunk)
    step = chunk_rows(spec)
    n_rows = min(step, spec.rows - chunk * step)
    quantized = quants.block_format(ggml_type).block_size > 1
    if blocks and quantized and spec.kind == "normal":
        raw = random_blocks(ggml_type, rng, n_rows * spec.cols, spec.std)
        return raw.reshape(n_rows, -1)
    return quants.quantize(float_values(spec, rng, n_rows), ggml_type)
