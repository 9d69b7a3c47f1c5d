"""The tensors a `qwen35` GGUF must hold (spec 3), and their validation against a file's records.

`expected_tensors(config)` lists every tensor llama.cpp's qwen35 loader creates, with the ggml
shape the config implies and whether it is required. `check_tensors` compares a file's records
with that list: missing, unexpected or mis-shaped tensors, unsupported types, misaligned or
truncated data are each reported by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import gguf

from engine import quants
from engine.gguf_header import Header

if TYPE_CHECKING:
    from engine.gguf_file import Qwen35Config


class GGUFError(ValueError):
    """A file that is not a usable qwen35 GGUF; the message names the file and the problem."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    ggml_type: int
    type_name: str  # e.g. "Q4_K"
    shape: tuple[int, ...]  # ggml order, ne0 (contiguous) first
    offset: int  # absolute byte offset in the file
    n_bytes: int


@dataclass(frozen=True)
class Expected:
    shape: tuple[int, ...]  # ggml order
    required: bool = True


def _type_name(ggml_type: int) -> str:
    try:
        return gguf.GGMLQuantizationType(ggml_type).name
    except ValueError:
        return f"unknown type {ggml_type}"


def _attention_block(c: Qwen35Config, b: str, fused_qkv: bool) -> dict[str, Expected]:
    q_dim, kv_dim = c.n_head * c.head_dim, c.n_head_kv * c.head_dim
    if fused_qkv:  # llama.cpp tries a fused q|gate|k|v projection before the separate ones
        qkv = {f"{b}.attn_qkv.weight": Expected((c.n_embd, 2 * q_dim + 2 * kv_dim))}
    else:
        qkv = {
            f"{b}.attn_q.weight": Expected((c.n_embd, 2 * q_dim)),
            f"{b}.attn_k.weight": Expected((c.n_embd, kv_dim)),
            f"{b}.attn_v.weight": Expected((c.n_embd, kv_dim)),
        }
    return qkv | {
        f"{b}.attn_output.weight": Expected((q_dim, c.n_embd)),
        f"{b}.attn_q_norm.weight": Expected((c.head_dim,)),
        f"{b}.attn_k_norm.weight": Expected((c.head_dim,)),
    }


def _deltanet_block(c: Qwen35Config, b: str) -> dict[str, Expected]:
    key_dim = c.ssm_n_k_heads * c.ssm_d_state
    value_dim = c.ssm_n_v_heads * c.ssm_d_state
    return {
        f"{b}.attn_qkv.weight": Expected((c.n_embd, 2 * key_dim + value_dim)),
        f"{b}.attn_gate.weight": Expected((c.n_embd, value_dim)),
        f"{b}.ssm_conv1d.weight": Expected((c.ssm_conv_kernel, 2 * key_dim + value_dim)),
        f"{b}.ssm_dt.bias": Expected((c.ssm_n_v_heads,)),
        f"{b}.ssm_a": Expected((c.ssm_n_v_heads,)),
        f"{b}.ssm_beta.weight": Expected((c.n_embd, c.ssm_n_v_heads)),
        f"{b}.ssm_alpha.weight": Expected((c.n_embd, c.ssm_n_v_heads)),
        f"{b}.ssm_norm.weight": Expected((c.ssm_d_state,)),
        f"{b}.ssm_out.weight": Expected((value_dim, c.n_embd)),
    }


def _common_block(c: Qwen35Config, b: str) -> dict[str, Expected]:
    return {
        f"{b}.attn_norm.weight": Expected((c.n_embd,)),
        f"{b}.post_attention_norm.weight": Expected((c.n_embd,)),
        f"{b}.ffn_gate.weight": Expected((c.n_embd, c.n_ff)),
        f"{b}.ffn_up.weight": Expected((c.n_embd, c.n_ff)),
        f"{b}.ffn_down.weight": Expected((c.n_ff, c.n_embd)),
    }


def _mtp_extras(c: Qwen35Config, b: str) -> dict[str, Expected]:
    return {
        f"{b}.nextn.eh_proj.weight": Expected((2 * c.n_embd, c.n_embd)),
        f"{b}.nextn.enorm.weight": Expected((c.n_embd,)),
        f"{b}.nextn.hnorm.weight": Expected((c.n_embd,)),
        f"{b}.nextn.shared_head_norm.weight": Expected((c.n_embd,), required=False),
        f"{b}.nextn.embed_tokens.weight": Expected((c.n_embd, c.n_vocab), required=False),
        f"{b}.nextn.shared_head_head.weight": Expected((c.n_embd, c.n_vocab), required=False),
    }


def expected_tensors(
    c: Qwen35Config, names: set[str] | frozenset[str] = frozenset()
) -> dict[str, Expected]:
    """Every tensor of the architecture -> expected ggml shape; `names` (the file's tensor names)
    only decides between the fused and the separate q/k/v layout of attention blocks."""
    out = {
        "token_embd.weight": Expected((c.n_embd, c.n_vocab)),
        "output_norm.weight": Expected((c.n_embd,)),
        "output.weight": Expected((c.n_embd, c.n_vocab), required=False),  # else tied to token_embd
    }
    for layer in range(c.n_layer + c.n_nextn):
        b = f"blk.{layer}"
        out |= _common_block(c, b)
        if layer < c.n_layer and c.recurrent[layer]:
            out |= _deltanet_block(c, b)
        else:
            fused = f"{b}.attn_qkv.weight" in names and f"{b}.attn_q.weight" not in names
            out |= _attention_block(c, b, fused)
        if layer >= c.n_layer:
            out |= _mtp_extras(c, b)
    return out


def _info(path: Path, header: Header, rec_index: int, file_size: int) -> TensorInfo:
    rec = header.tensors[rec_index]
    name = rec.name
    if rec.ggml_type not in quants.FORMATS:
        supported = ", ".join(f.name for f in quants.FORMATS.values())
        raise GGUFError(
            f"{path}: tensor {name!r} has type {_type_name(rec.ggml_type)} which OpenJet does not support (supported: {supported})"
        )
    fmt = quants.FORMATS[rec.ggml_type]
    if rec.shape[0] % fmt.block_size:
        raise GGUFError(
            f"{path}: tensor {name!r} row length {rec.shape[0]} is not a multiple of the {fmt.name} block size {fmt.block_size}"
        )
    n_bytes = quants.tensor_bytes(rec.ggml_type, tuple(reversed(rec.shape)))
    offset = header.data_offset + rec.rel_offset
    if rec.rel_offset % header.alignment:
        raise GGUFError(
            f"{path}: tensor {name!r} data offset {rec.rel_offset} is not aligned to {header.alignment}"
        )
    if offset + n_bytes > file_size:
        raise GGUFError(
            f"{path}: truncated file: tensor {name!r} needs bytes up to {offset + n_bytes}, the file has {file_size}"
        )
    return TensorInfo(name, rec.ggml_type, fmt.name, rec.shape, offset, n_bytes)


def check_tensors(
    path: Path, header: Header, config: Qwen35Config, file_size: int
) -> dict[str, TensorInfo]:
    """Validated tensor index of the file, or GGUFError naming the first problem found."""
    names = {rec.name for rec in header.tensors}
    if len(names) != len(header.tensors):
        raise GGUFError(f"{path}: duplicate tensor names")
    expected = expected_tensors(config, names)
    missing = [n for n, e in expected.items() if e.required and n not in names]
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise GGUFError(f"{path}: missing tensor {missing[0]!r}{more}")
    unexpected = sorted(names - expected.keys())
    if unexpected:
        raise GGUFError(
            f"{path}: unexpected tensor {unexpected[0]!r} for a qwen35 model with this config"
        )
    tensors: dict[str, TensorInfo] = {}
    for index, rec in enumerate(header.tensors):
        want = expected[rec.name].shape
        if rec.shape != want:
            raise GGUFError(
                f"{path}: tensor {rec.name!r} has shape {list(rec.shape)}, expected {list(want)} (ggml order)"
            )
        tensors[rec.name] = _info(path, header, index, file_size)
    return tensors
