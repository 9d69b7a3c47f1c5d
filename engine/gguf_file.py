"""Open a `qwen35` GGUF: memory-mapped tensors, a frozen hyperparameter config, a tensor index.

`open_gguf(path)` parses the container (`engine.gguf_header`), reads the `qwen35.*` keys the way
llama.cpp does (spec 2.2), checks every tensor the architecture needs against the shape the
config implies (spec 3, `engine.gguf_tensors`), that its type is one OpenJet can run and that its
bytes lie inside the file. Anything wrong raises `GGUFError` naming the file and the problem.
Tensor bytes are never copied at open: `raw()` is a view of the mapping.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from engine import quants
from engine.gguf_header import Header, HeaderError, MetaValue, parse_header
from engine.gguf_tensors import GGUFError, TensorInfo, check_tensors

__all__ = ["GGUFError", "GGUFModel", "Qwen35Config", "TensorInfo", "open_gguf"]

ARCH = "qwen35"


@dataclass(frozen=True)
class Qwen35Config:
    """Hyperparameters of a qwen35 model as llama.cpp derives them from the GGUF keys."""

    n_embd: int
    n_layer: int  # trunk layers = block_count - n_nextn
    n_nextn: int
    n_vocab: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int  # attention.key_length (== value_length)
    rms_eps: float
    rope_n_rot: int
    rope_sections: tuple[int, int, int, int]
    rope_freq_base: float
    ssm_conv_kernel: int
    ssm_d_inner: int
    ssm_d_state: int
    ssm_n_v_heads: int  # ssm.time_step_rank
    ssm_n_k_heads: int  # ssm.group_count
    recurrent: tuple[bool, ...]  # one per trunk layer; True = Gated DeltaNet
    context_length: int
    attention_scale: float


class _Keys:
    """Typed access to the metadata with errors that name the missing or malformed key."""

    def __init__(self, path: Path, meta: Mapping[str, MetaValue]) -> None:
        self.path, self.meta = path, meta

    def fail(self, problem: str) -> GGUFError:
        return GGUFError(f"{self.path}: {problem}")

    def get(self, key: str, default: Any = None) -> Any:
        item = self.meta.get(key)
        if item is None:
            if default is None:
                raise self.fail(f"missing metadata key {key!r}")
            return default
        return item.value

    def uint(self, key: str, default: int | None = None) -> int:
        value = self.get(key, default)
        if isinstance(value, np.ndarray):
            # llama.cpp accepts per-layer arrays; OpenJet needs one value for all layers
            if value.size == 0 or np.any(value != value.flat[0]):
                raise self.fail(f"{key!r} differs between layers ({value.tolist()}); not supported")
            value = value.flat[0]
        if isinstance(value, (str, bool)) or not isinstance(value, (int, np.integer)) or value < 0:
            raise self.fail(f"metadata key {key!r} should be a non-negative integer, got {value!r}")
        return int(value)

    def number(self, key: str, default: float | None = None) -> float:
        value = self.get(key, default)
        if isinstance(value, (str, bool, np.ndarray)) or not math.isfinite(float(value)):
            raise self.fail(f"metadata key {key!r} should be a number, got {value!r}")
        return float(value)


def _recurrent(keys: _Keys, n_layer: int, n_blocks: int) -> tuple[bool, ...]:
    """Layer types: attention.recurrent_layers when present, else llama.cpp's interval rule."""
    flags = keys.meta.get(f"{ARCH}.attention.recurrent_layers")
    if flags is None:
        interval = keys.uint(f"{ARCH}.full_attention_interval", 4)
        if interval == 0:
            raise keys.fail("full_attention_interval is 0")
        return tuple((i + 1) % interval != 0 for i in range(n_layer))
    values = np.asarray(flags.value)
    if values.ndim != 1 or len(values) != n_blocks:
        raise keys.fail(
            f"attention.recurrent_layers has {values.size} entries, expected block_count {n_blocks}"
        )
    if values[n_layer:].any():
        raise keys.fail("attention.recurrent_layers marks an MTP block as recurrent")
    return tuple(bool(v) for v in values[:n_layer])


def _rope_sections(keys: _Keys) -> tuple[int, int, int, int]:
    raw = np.asarray(keys.get(f"{ARCH}.rope.dimension_sections")).reshape(-1)
    if raw.size > 4 or raw.dtype.kind not in "iu":
        raise keys.fail(f"rope.dimension_sections should be up to 4 integers, got {raw.tolist()}")
    padded = [int(v) for v in raw] + [0] * (4 - raw.size)
    return (padded[0], padded[1], padded[2], padded[3])


def read_config(path: Path, meta: Mapping[str, MetaValue]) -> Qwen35Config:
    """Qwen35Config from the metadata; GGUFError for a wrong architecture or bad/missing keys."""
    keys = _Keys(path, meta)
    arch = keys.get("general.architecture")
    if arch != ARCH:
        raise keys.fail(f"architecture is {arch!r}, expected {ARCH!r} (Qwen3.5/3.6 27B family)")
    k = f"{ARCH}."
    n_blocks = keys.uint(k + "block_count")
    n_nextn = keys.uint(k + "nextn_predict_layers", 0)
    if n_nextn >= n_blocks:
        raise keys.fail(
            f"nextn_predict_layers {n_nextn} leaves no trunk layers of block_count {n_blocks}"
        )
    n_layer = n_blocks - n_nextn
    n_head = keys.uint(k + "attention.head_count")
    head_dim = keys.uint(k + "attention.key_length")
    if keys.uint(k + "attention.value_length", head_dim) != head_dim:
        raise keys.fail(
            "attention.key_length and attention.value_length differ; qwen35 needs them equal"
        )
    tokens = meta.get("tokenizer.ggml.tokens")
    if tokens is None:
        raise keys.fail("missing metadata key 'tokenizer.ggml.tokens' (the vocabulary)")
    scale = keys.number(k + "attention.scale", 0.0)
    config = Qwen35Config(
        n_embd=keys.uint(k + "embedding_length"),
        n_layer=n_layer,
        n_nextn=n_nextn,
        n_vocab=len(tokens.value),
        n_ff=keys.uint(k + "feed_forward_length"),
        n_head=n_head,
        n_head_kv=keys.uint(k + "attention.head_count_kv", n_head),
        head_dim=head_dim,
        rms_eps=keys.number(k + "attention.layer_norm_rms_epsilon"),
        rope_n_rot=keys.uint(k + "rope.dimension_count", head_dim),
        rope_sections=_rope_sections(keys),
        rope_freq_base=keys.number(k + "rope.freq_base", 10000.0),
        ssm_conv_kernel=keys.uint(k + "ssm.conv_kernel"),
        ssm_d_inner=keys.uint(k + "ssm.inner_size"),
        ssm_d_state=keys.uint(k + "ssm.state_size"),
        ssm_n_v_heads=keys.uint(k + "ssm.time_step_rank"),
        ssm_n_k_heads=keys.uint(k + "ssm.group_count"),
        recurrent=_recurrent(keys, n_layer, n_blocks),
        context_length=keys.uint(k + "context_length"),
        attention_scale=scale if scale else 1.0 / math.sqrt(head_dim) if head_dim else 0.0,
    )
    _check_consistency(keys, config)
    return config


def _check_consistency(keys: _Keys, c: Qwen35Config) -> None:
    problems = []
    if min(c.n_embd, c.n_ff, c.n_head, c.n_head_kv, c.head_dim, c.n_vocab) == 0:
        problems.append("a model dimension is 0")
    elif c.n_head % c.n_head_kv:
        problems.append(f"head_count {c.n_head} is not a multiple of head_count_kv {c.n_head_kv}")
    if c.ssm_n_k_heads == 0 or c.ssm_n_v_heads % max(c.ssm_n_k_heads, 1):
        problems.append(
            f"ssm.time_step_rank {c.ssm_n_v_heads} is not a multiple of ssm.group_count {c.ssm_n_k_heads}"
        )
    if c.ssm_d_inner != c.ssm_n_v_heads * c.ssm_d_state:
        problems.append(f"ssm.inner_size {c.ssm_d_inner} != time_step_rank x state_size")
    if c.rope_n_rot % 2 or c.rope_n_rot > c.head_dim:
        problems.append(
            f"rope.dimension_count {c.rope_n_rot} must be even and at most key_length {c.head_dim}"
        )
    if c.ssm_conv_kernel < 1 or c.rms_eps <= 0:
        problems.append("ssm.conv_kernel or layer_norm_rms_epsilon is not positive")
    if problems:
        raise keys.fail("; ".join(problems))


class GGUFModel:
    """An opened qwen35 GGUF: config, tensor index and zero-copy access to tensor bytes."""

    def __init__(
        self,
        path: Path,
        mapped: np.ndarray,
        header: Header,
        config: Qwen35Config,
        tensors: dict[str, TensorInfo],
    ) -> None:
        self.path = path
        self.config = config
        self.header = header
        self.tensors: Mapping[str, TensorInfo] = MappingProxyType(tensors)
        self.metadata: Mapping[str, Any] = MappingProxyType(
            {k: v.value for k, v in header.metadata.items()}
        )
        self._mapped = mapped

    def has(self, name: str) -> bool:
        return name in self.tensors

    def info(self, name: str) -> TensorInfo:
        try:
            return self.tensors[name]
        except KeyError:
            raise GGUFError(f"{self.path}: no tensor named {name!r}") from None

    def raw(self, name: str) -> np.ndarray:
        """uint8 view (no copy) of the tensor's bytes in the mapped file."""
        t = self.info(name)
        return self._mapped[t.offset : t.offset + t.n_bytes]

    def dequantize(self, name: str) -> np.ndarray:
        """float32 values, numpy shape = reversed ggml shape ((rows, cols); 1-D for vectors)."""
        t = self.info(name)
        return quants.dequantize(self.raw(name), t.ggml_type, tuple(reversed(t.shape)))

    def __repr__(self) -> str:
        return f"GGUFModel({str(self.path)!r}, {len(self.tensors)} tensors)"


def open_gguf(path: str | Path) -> GGUFModel:
    """Open and validate a qwen35 GGUF (memory-mapped); GGUFError says what is wrong."""
    path = Path(path)
    if path.is_dir():
        raise GGUFError(f"{path}: is a directory, not a GGUF file")
    if not path.is_file():
        raise GGUFError(f"{path}: no such file")
    if path.stat().st_size == 0:
        raise GGUFError(f"{path}: empty file, not a GGUF model")
    try:
        mapped = np.memmap(path, dtype=np.uint8, mode="r")
    except OSError as err:
        raise GGUFError(f"{path}: cannot map file: {err}") from err
    try:
        header = parse_header(memoryview(mapped.data))  # the mapping's buffer, no copy
    except HeaderError as err:
        raise GGUFError(f"{path}: {err}") from None
    split = header.metadata.get("split.count")
    if split is not None and int(split.value) > 1:
        raise GGUFError(
            f"{path}: a split GGUF (part of {split.value}); merge it first (llama-gguf-split --merge)"
        )
    config = read_config(path, header.metadata)
    tensors = check_tensors(path, header, config, len(mapped))
    return GGUFModel(path, mapped, header, config, tensors)
