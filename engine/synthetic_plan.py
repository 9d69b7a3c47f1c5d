"""Shapes and tensor types of synthetic `qwen35` models: presets, tensor list, quant recipes.

The tensor list is the one llama.cpp's `llama_model_qwen35::load_arch_tensors` loads (spec 3.1-3.4):
global tensors, 3 Gated DeltaNet layers then 1 gated full-attention layer, repeated, and one MTP
block. Every K-quantized row length is a multiple of 256 in every preset, so the Q4_K_M recipe
never needs llama.cpp's fallback types.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from engine import quants
from engine.synthetic_weights import WeightSpec

NORM_STD = 0.1  # spread of RMSNorm weights around 1
LOGIT_STD = 6.0  # std of the LM head logits: top-1 probability typically 0.3-0.8


@dataclass(frozen=True)
class SyntheticPreset:
    """Model dimensions (names as in engine.gguf_file.Qwen35Config)."""

    name: str
    n_embd: int
    n_layer: int  # trunk layers (block_count - n_nextn)
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    rope_n_rot: int
    rope_sections: tuple[int, int, int, int]
    ssm_d_state: int
    ssm_n_k_heads: int
    ssm_n_v_heads: int
    n_vocab: int
    context_length: int
    ssm_conv_kernel: int = 4
    n_nextn: int = 1
    full_attention_interval: int = 4
    rope_freq_base: float = 1.0e7
    rms_eps: float = 1e-6
    random_blocks: bool = (
        False  # quantized tensors as random blocks (disk speed) not encoded floats
    )

    @property
    def recurrent(self) -> tuple[bool, ...]:
        return tuple((i + 1) % self.full_attention_interval != 0 for i in range(self.n_layer))


PRESETS: dict[str, SyntheticPreset] = {
    "tiny": SyntheticPreset(
        name="tiny", n_embd=256, n_layer=8, n_ff=512, n_head=4, n_head_kv=2, head_dim=64,
        rope_n_rot=16, rope_sections=(3, 3, 2, 0), ssm_d_state=64, ssm_n_k_heads=2,
        ssm_n_v_heads=4, n_vocab=2048, context_length=16384,
    ),
    "small": SyntheticPreset(
        name="small", n_embd=512, n_layer=16, n_ff=1536, n_head=8, n_head_kv=2, head_dim=128,
        rope_n_rot=32, rope_sections=(6, 5, 5, 0), ssm_d_state=128, ssm_n_k_heads=2,
        ssm_n_v_heads=6, n_vocab=8192, context_length=32768,
    ),
    # tiny with the 27B's attention heads (256 wide, 4 query heads per KV head): the shape the
    # tensor-core attention kernel runs on
    "tiny-wide": SyntheticPreset(
        name="tiny-wide", n_embd=256, n_layer=8, n_ff=512, n_head=8, n_head_kv=2, head_dim=256,
        rope_n_rot=64, rope_sections=(11, 11, 10, 0), ssm_d_state=64, ssm_n_k_heads=2,
        ssm_n_v_heads=4, n_vocab=2048, context_length=16384,
    ),
    "27b": SyntheticPreset(
        name="27b", n_embd=5120, n_layer=64, n_ff=17408, n_head=24, n_head_kv=4, head_dim=256,
        rope_n_rot=64, rope_sections=(11, 11, 10, 0), ssm_d_state=128, ssm_n_k_heads=16,
        ssm_n_v_heads=48, n_vocab=248320, context_length=262144, random_blocks=True,
    ),
}  # fmt: skip


def _linear(name: str, n_out: int, n_in: int) -> WeightSpec:
    return WeightSpec(name, (n_out, n_in), "normal", 1.0 / math.sqrt(n_in))


def _norm(name: str, n: int) -> WeightSpec:
    return WeightSpec(name, (n,), "norm", NORM_STD)


def _ffn(p: SyntheticPreset, b: str) -> list[WeightSpec]:
    return [
        _norm(f"{b}.post_attention_norm.weight", p.n_embd),
        _linear(f"{b}.ffn_gate.weight", p.n_ff, p.n_embd),
        _linear(f"{b}.ffn_up.weight", p.n_ff, p.n_embd),
        _linear(f"{b}.ffn_down.weight", p.n_embd, p.n_ff),
    ]


def _deltanet(p: SyntheticPreset, b: str) -> list[WeightSpec]:
    key_dim = p.ssm_n_k_heads * p.ssm_d_state
    value_dim = p.ssm_n_v_heads * p.ssm_d_state
    conv_dim = 2 * key_dim + value_dim
    return [
        _norm(f"{b}.attn_norm.weight", p.n_embd),
        _linear(f"{b}.attn_qkv.weight", conv_dim, p.n_embd),
        _linear(f"{b}.attn_gate.weight", value_dim, p.n_embd),
        WeightSpec(
            f"{b}.ssm_conv1d.weight",
            (conv_dim, p.ssm_conv_kernel),
            "normal",
            1.0 / math.sqrt(p.ssm_conv_kernel),
        ),
        WeightSpec(f"{b}.ssm_dt.bias", (p.ssm_n_v_heads,), "dt_bias"),
        WeightSpec(f"{b}.ssm_a", (p.ssm_n_v_heads,), "ssm_a"),
        _linear(f"{b}.ssm_beta.weight", p.ssm_n_v_heads, p.n_embd),
        _linear(f"{b}.ssm_alpha.weight", p.ssm_n_v_heads, p.n_embd),
        _norm(f"{b}.ssm_norm.weight", p.ssm_d_state),
        _linear(f"{b}.ssm_out.weight", p.n_embd, value_dim),
    ]


def _attention(p: SyntheticPreset, b: str) -> list[WeightSpec]:
    q_dim = p.n_head * p.head_dim
    kv_dim = p.n_head_kv * p.head_dim
    return [
        _norm(f"{b}.attn_norm.weight", p.n_embd),
        _linear(f"{b}.attn_q.weight", 2 * q_dim, p.n_embd),  # per head: query rows, then gate rows
        _linear(f"{b}.attn_k.weight", kv_dim, p.n_embd),
        _linear(f"{b}.attn_v.weight", kv_dim, p.n_embd),
        _norm(f"{b}.attn_q_norm.weight", p.head_dim),
        _norm(f"{b}.attn_k_norm.weight", p.head_dim),
        _linear(f"{b}.attn_output.weight", p.n_embd, q_dim),
    ]


def _mtp(p: SyntheticPreset, b: str) -> list[WeightSpec]:
    return [
        _linear(f"{b}.nextn.eh_proj.weight", p.n_embd, 2 * p.n_embd),
        _norm(f"{b}.nextn.enorm.weight", p.n_embd),
        _norm(f"{b}.nextn.hnorm.weight", p.n_embd),
        _norm(f"{b}.nextn.shared_head_norm.weight", p.n_embd),
    ]


def tensor_specs(p: SyntheticPreset) -> list[WeightSpec]:
    """Every tensor of the model in file order (global, trunk blocks, MTP blocks)."""
    specs = [
        WeightSpec("token_embd.weight", (p.n_vocab, p.n_embd), "normal", 1.0),
        _norm("output_norm.weight", p.n_embd),
        WeightSpec(
            "output.weight", (p.n_vocab, p.n_embd), "normal", LOGIT_STD / math.sqrt(p.n_embd)
        ),
    ]
    for layer, recurrent in enumerate(p.recurrent):
        block = f"blk.{layer}"
        specs += (_deltanet(p, block) if recurrent else _attention(p, block)) + _ffn(p, block)
    for layer in range(p.n_layer, p.n_layer + p.n_nextn):
        block = f"blk.{layer}"
        specs += _attention(p, block) + _ffn(p, block) + _mtp(p, block)
    return specs


def _keeps_f32(spec: WeightSpec) -> bool:
    """Tensors llama.cpp never quantizes: 1-D tensors, norms, ssm_conv1d, ssm_a, ssm_dt.bias."""
    return len(spec.shape) == 1 or spec.name.endswith("_norm.weight") or ".ssm_conv1d." in spec.name


def more_bits(i: int, n: int) -> bool:
    """llama.cpp's use_more_bits: the first and last eighth of the layers and every third between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _layer(name: str) -> int:
    return int(name.split(".")[1]) if name.startswith("blk.") else -1


def _q4_k_m_type(spec: WeightSpec, p: SyntheticPreset) -> int:
    n_blocks = p.n_layer + p.n_nextn
    if spec.name == "output.weight":
        return quants.Q6_K
    attn_v_like = spec.name.endswith((".attn_v.weight", ".attn_qkv.weight"))
    if (attn_v_like or spec.name.endswith(".ffn_down.weight")) and more_bits(
        _layer(spec.name), n_blocks
    ):
        return quants.Q6_K
    return quants.Q4_K


def _mixed_type(spec: WeightSpec, p: SyntheticPreset) -> int:
    """An Unsloth-"UD"-style mix: sensitive tensors at higher precision, every type used."""
    name = spec.name
    if name == "output.weight":
        return quants.Q6_K
    if name == "token_embd.weight" or ".nextn." in name:
        return quants.Q8_0
    if name.endswith(".ssm_out.weight"):
        return quants.Q5_K
    if name.endswith((".ssm_alpha.weight", ".ssm_beta.weight")):
        return quants.BF16
    if name.endswith(".attn_k.weight"):
        return quants.F16
    return _q4_k_m_type(spec, p)


def tensor_type(spec: WeightSpec, p: SyntheticPreset, quant: str) -> int:
    """The ggml type of `spec` in quant mix `quant` (f32, f16, bf16, q8_0, q4_k_m, mixed)."""
    if quant == "f32" or _keeps_f32(spec):
        return quants.F32
    simple = {"f16": quants.F16, "bf16": quants.BF16, "q8_0": quants.Q8_0}
    if quant in simple:
        return simple[quant]
    if quant == "q4_k_m":
        return _q4_k_m_type(spec, p)
    if quant == "mixed":
        return _mixed_type(spec, p)
    raise ValueError(f"unknown quant mix {quant!r}")
