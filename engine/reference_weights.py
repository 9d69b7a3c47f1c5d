"""The qwen35 weights as float32 numpy matrices, dequantized once from a GGUF (spec section 3).

Matrices keep llama.cpp's math orientation: a projection weight is [out, in] (ggml {in, out}),
so `reference_ops.linear(x, W)` computes y = x · Wᵀ.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from engine.gguf_file import GGUFModel, Qwen35Config

Array = np.ndarray


@dataclass(frozen=True)
class FFNWeights:
    gate: Array  # [F, E]
    up: Array  # [F, E]
    down: Array  # [E, F]


@dataclass(frozen=True)
class DeltaNetWeights:
    qkv: Array  # [2·Hk·Dk + Hv·Dv, E]: pre-conv q | k | v (v heads in tiled order)
    z: Array  # [Hv·Dv, E]: output-gate input of the gated norm (attn_gate)
    conv: Array  # [channels, K]: depthwise causal taps, tap K-1 = current token
    dt_bias: Array  # [Hv]
    a: Array  # [Hv]: −exp(A_log), already negated and exponentiated
    beta: Array  # [Hv, E]
    alpha: Array  # [Hv, E]
    norm: Array  # [Dv]: gated RMSNorm weight, used as stored (no +1)
    out: Array  # [E, Hv·Dv]


@dataclass(frozen=True)
class AttentionWeights:
    q: Array  # [Hq·2·Dh, E]: per head [query (Dh) | gate (Dh)]
    k: Array  # [Hkv·Dh, E]
    v: Array  # [Hkv·Dh, E]
    q_norm: Array  # [Dh]
    k_norm: Array  # [Dh]
    out: Array  # [E, Hq·Dh]


@dataclass(frozen=True)
class LayerWeights:
    attn_norm: Array  # [E]
    mixer: DeltaNetWeights | AttentionWeights
    post_norm: Array  # [E]: the pre-FFN norm (GGUF name post_attention_norm)
    ffn: FFNWeights


@dataclass(frozen=True)
class MTPWeights:
    enorm: Array  # [E]
    hnorm: Array  # [E]
    eh_proj: Array  # [E, 2E]: input is concat(normed embedding, normed hidden)
    block: LayerWeights  # a full-attention block with its own KV cache
    head_norm: Array  # [E]: nextn.shared_head_norm (falls back to output_norm)
    embed: Array  # [V, E]: nextn.embed_tokens or the shared token_embd
    head: Array  # [V, E]: nextn.shared_head_head or the shared LM head


@dataclass(frozen=True)
class ModelWeights:
    embed: Array  # [V, E]
    layers: tuple[LayerWeights, ...]  # the trunk, n_layer entries
    output_norm: Array  # [E]
    output: Array  # [V, E]: the LM head (token_embd when output.weight is absent)
    mtp: MTPWeights | None


def _tensor(model: GGUFModel, name: str) -> Array:
    """One tensor as a contiguous float32 array (owning its memory, not a view of the file)."""
    return np.ascontiguousarray(model.dequantize(name), dtype=np.float32)


def _ffn(model: GGUFModel, prefix: str) -> FFNWeights:
    return FFNWeights(
        gate=_tensor(model, f"{prefix}.ffn_gate.weight"),
        up=_tensor(model, f"{prefix}.ffn_up.weight"),
        down=_tensor(model, f"{prefix}.ffn_down.weight"),
    )


def _deltanet(model: GGUFModel, prefix: str) -> DeltaNetWeights:
    return DeltaNetWeights(
        qkv=_tensor(model, f"{prefix}.attn_qkv.weight"),
        z=_tensor(model, f"{prefix}.attn_gate.weight"),
        conv=_tensor(model, f"{prefix}.ssm_conv1d.weight"),
        dt_bias=_tensor(model, f"{prefix}.ssm_dt.bias"),
        a=_tensor(model, f"{prefix}.ssm_a"),
        beta=_tensor(model, f"{prefix}.ssm_beta.weight"),
        alpha=_tensor(model, f"{prefix}.ssm_alpha.weight"),
        norm=_tensor(model, f"{prefix}.ssm_norm.weight"),
        out=_tensor(model, f"{prefix}.ssm_out.weight"),
    )


def _attention(model: GGUFModel, prefix: str, config: Qwen35Config) -> AttentionWeights:
    if model.has(f"{prefix}.attn_q.weight"):
        q = _tensor(model, f"{prefix}.attn_q.weight")
        k = _tensor(model, f"{prefix}.attn_k.weight")
        v = _tensor(model, f"{prefix}.attn_v.weight")
    else:  # a fused q|k|v projection, which llama.cpp also accepts (spec 3.3)
        fused = _tensor(model, f"{prefix}.attn_qkv.weight")
        n_q = config.n_head * 2 * config.head_dim
        n_kv = config.n_head_kv * config.head_dim
        q, k, v = fused[:n_q], fused[n_q : n_q + n_kv], fused[n_q + n_kv :]
    return AttentionWeights(
        q=q,
        k=k,
        v=v,
        q_norm=_tensor(model, f"{prefix}.attn_q_norm.weight"),
        k_norm=_tensor(model, f"{prefix}.attn_k_norm.weight"),
        out=_tensor(model, f"{prefix}.attn_output.weight"),
    )


def _layer(model: GGUFModel, index: int, recurrent: bool) -> LayerWeights:
    prefix = f"blk.{index}"
    mixer: DeltaNetWeights | AttentionWeights
    mixer = _deltanet(model, prefix) if recurrent else _attention(model, prefix, model.config)
    return LayerWeights(
        attn_norm=_tensor(model, f"{prefix}.attn_norm.weight"),
        mixer=mixer,
        post_norm=_tensor(model, f"{prefix}.post_attention_norm.weight"),
        ffn=_ffn(model, prefix),
    )


def _optional(model: GGUFModel, name: str, fallback: Array) -> Array:
    return _tensor(model, name) if model.has(name) else fallback


def _mtp(model: GGUFModel, embed: Array, output_norm: Array, output: Array) -> MTPWeights | None:
    config = model.config
    if config.n_nextn < 1:
        return None
    index = config.n_layer  # the first block after the trunk; llama.cpp runs only this one
    prefix = f"blk.{index}.nextn"
    return MTPWeights(
        enorm=_tensor(model, f"{prefix}.enorm.weight"),
        hnorm=_tensor(model, f"{prefix}.hnorm.weight"),
        eh_proj=_tensor(model, f"{prefix}.eh_proj.weight"),
        block=_layer(model, index, recurrent=False),
        head_norm=_optional(model, f"{prefix}.shared_head_norm.weight", output_norm),
        embed=_optional(model, f"{prefix}.embed_tokens.weight", embed),
        head=_optional(model, f"{prefix}.shared_head_head.weight", output),
    )


def load_weights(model: GGUFModel) -> ModelWeights:
    """Dequantize every tensor the forward pass uses to float32 (once, at model load)."""
    config = model.config
    embed = _tensor(model, "token_embd.weight")
    output_norm = _tensor(model, "output_norm.weight")
    output = _optional(model, "output.weight", embed)
    layers = tuple(_layer(model, i, config.recurrent[i]) for i in range(config.n_layer))
    return ModelWeights(
        embed=embed,
        layers=layers,
        output_norm=output_norm,
        output=output,
        mtp=_mtp(model, embed, output_norm, output),
    )
