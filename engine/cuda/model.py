"""The qwen35 trunk's weights on the GPU, read from a GGUF or made at random (benchmarks).

Products that read the same input and share a weight type are fused into one matrix (their rows
concatenated), so a DeltaNet layer's qkv | z | beta | alpha, an attention layer's q | k | v and
the FFN's gate | up are one or a few launches; each fused product writes its columns of one
projection buffer (`Proj.offset`). The MTP head (the first block after the trunk, spec 6) is
loaded when the file has one (`CudaModel.mtp`); engine/cuda/mtp.py runs it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.cuda import weights
from engine.cuda.build import KernelDims
from engine.cuda.weights import GpuWeight


@dataclass(frozen=True)
class Dims:
    """The model shape the backend needs (from Qwen35Config or a synthetic preset)."""

    n_embd: int
    n_layer: int
    n_vocab: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    rms_eps: float
    rope_n_rot: int
    rope_freq_base: float
    ssm_d_state: int  # Dk = Dv
    ssm_n_k_heads: int
    ssm_n_v_heads: int
    recurrent: tuple[bool, ...]
    context_length: int
    n_nextn: int  # MTP blocks after the trunk (the backend runs the first)
    attention_scale: float

    @classmethod
    def of(cls, cfg: Any) -> Dims:
        scale = getattr(cfg, "attention_scale", 1.0 / float(np.sqrt(cfg.head_dim)))
        names = [f for f in cls.__dataclass_fields__ if f != "attention_scale"]
        return cls(**{n: getattr(cfg, n) for n in names}, attention_scale=scale)

    @property
    def conv_channels(self) -> int:  # C
        return 2 * self.ssm_n_k_heads * self.ssm_d_state + self.ssm_n_v_heads * self.ssm_d_state

    @property
    def dn_proj_width(self) -> int:  # qkv | z | beta | alpha, padded to 4 floats
        hv = self.ssm_n_v_heads
        return _pad4(self.conv_channels + hv * self.ssm_d_state + 2 * hv)

    @property
    def att_proj_width(self) -> int:  # q(+gate) | k | v
        return _pad4((2 * self.n_head + 2 * self.n_head_kv) * self.head_dim)

    def kernel_dims(self, kv_page: int) -> KernelDims:
        return KernelDims(
            dn_dk=self.ssm_d_state, dn_dv=self.ssm_d_state, dn_hk=self.ssm_n_k_heads,
            att_d=self.head_dim, att_hq=self.n_head, att_hkv=self.n_head_kv,
            att_nrot=self.rope_n_rot, kv_page=kv_page,
        )  # fmt: skip


def _pad4(n: int) -> int:
    return (n + 3) // 4 * 4


@dataclass
class Proj:
    """One fused product: `weight` writes columns offset .. offset + weight.rows."""

    weight: GpuWeight
    offset: int


@dataclass
class Layer:
    recurrent: bool
    attn_norm: Any  # f32 [E]
    post_norm: Any  # f32 [E]
    mixer_in: list[Proj]  # DeltaNet: qkv|z|beta|alpha; attention: q|k|v
    mixer_out: GpuWeight  # ssm_out / attn_output
    ffn_in: list[Proj]  # gate|up
    ffn_down: GpuWeight
    # ffn_in is one weight whose gate and up rows alternate in groups of 8
    # (weights.interleave_halves): its products can finish SwiGLU (kernels.matmul_swiglu)
    ffn_interleaved: bool = False
    conv_w: Any = None  # f32 [C][4] (DeltaNet)
    q_norm: Any = None  # f32 [D] (attention)
    k_norm: Any = None
    dn_index: int = -1  # index among DeltaNet layers / attention layers
    att_index: int = -1


@dataclass
class MtpHead:
    """The MTP block: u = eh_proj(concat(enorm(embed(token)), hnorm(hidden))), a full-attention
    block on u with its own KV slab, then head_norm and the LM head (spec 6.1)."""

    block: Layer
    eh_proj: GpuWeight  # [E][2E]
    enorm: Any  # f32 [E]
    hnorm: Any
    head_norm: Any  # nextn.shared_head_norm, else output_norm
    embed: GpuWeight  # nextn.embed_tokens, else token_embd
    head: GpuWeight  # nextn.shared_head_head, else output


@dataclass
class CudaModel:
    dims: Dims
    token_embd: GpuWeight
    output_norm: Any
    output: GpuWeight
    layers: list[Layer]
    ssm_a: Any  # f32 [n_dn][Hv]
    dt_bias: Any  # f32 [n_dn][Hv]
    ssm_norm: Any  # f32 [n_dn][Dv]
    mtp: MtpHead | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def n_attention_slabs(self) -> int:
        """KV slabs of the pool: the trunk's attention layers, and the MTP block's if loaded."""
        return sum(1 for lay in self.layers if not lay.recurrent) + (1 if self.mtp else 0)

    @property
    def weight_bytes(self) -> int:
        total = self.output.nbytes
        for lay in self.layers:
            mats = [p.weight for p in lay.mixer_in + lay.ffn_in] + [lay.mixer_out, lay.ffn_down]
            total += sum(m.nbytes for m in mats)
        return total


# A tensor source: name -> (ggml type, rows, cols, raw bytes as a host array or device array).
Fetch = Callable[[str], tuple[int, int, int, Any]]


def _fused(fetch: Fetch, names: list[str]) -> list[Proj]:
    return _fuse(names, [fetch(n) for n in names])


def _fuse(names: list[str], parts: list[tuple[int, int, int, Any]]) -> list[Proj]:
    """Consecutive tensors of one type and row length become one GpuWeight (rows concatenated)."""
    out: list[Proj] = []
    offset, i = 0, 0
    while i < len(parts):
        gtype, cols = parts[i][0], parts[i][2]
        j = i
        while j < len(parts) and parts[j][0] == gtype and parts[j][2] == cols:
            j += 1
        rows = sum(p[1] for p in parts[i:j])
        raw = _joined(parts[i:j])
        out.append(
            Proj(weights.from_device_bytes("+".join(names[i:j]), raw, gtype, rows, cols), offset)
        )
        offset += rows
        i = j
    return out


def _joined(parts: list[tuple[int, int, int, Any]]) -> Any:
    """The tensors' GGUF bytes one after another on the GPU (rows concatenated)."""
    import cupy as cp

    return cp.concatenate([cp.asarray(p[3]).reshape(-1) for p in parts])


def _gate_up(fetch: Fetch, b: str) -> tuple[list[Proj], bool]:
    """The FFN's gate and up as one weight with their rows alternating in groups of 8
    (weights.interleave_halves), so its products can finish SwiGLU, where they can be fused so;
    else as `_fused` makes them. -> (the projections, interleaved)."""
    names = [b + "ffn_gate.weight", b + "ffn_up.weight"]
    parts = [fetch(n) for n in names]
    if not _interleavable(parts):
        return _fuse(names, parts), False
    gtype, rows, cols = parts[0][0], 2 * parts[0][1], parts[0][2]
    raw = weights.interleave_halves(_joined(parts), gtype, rows, cols)
    return [Proj(weights.from_device_bytes("+".join(names), raw, gtype, rows, cols), 0)], True


def _interleavable(parts: list[tuple[int, int, int, Any]]) -> bool:
    """Two tensors of one shape and one type that the mma products read (not f32 / bf16), rows
    a multiple of the interleaving group."""
    if len(parts) != 2 or parts[0][:3] != parts[1][:3]:
        return False
    gtype, rows = parts[0][0], parts[0][1]
    return gtype not in (weights.F32, weights.BF16) and rows % weights.GATE_UP_GROUP == 0


def _vector(fetch_vec: Callable[[str], np.ndarray], name: str) -> Any:
    import cupy as cp

    return cp.asarray(np.ascontiguousarray(fetch_vec(name), dtype=np.float32))


def _attention_layer(
    fetch: Fetch, fetch_vec: Callable[[str], np.ndarray], b: str, att_index: int, common: Any
) -> Layer:
    names = [b + n for n in ("attn_q.weight", "attn_k.weight", "attn_v.weight")]
    return Layer(
        False,
        mixer_in=_fused(fetch, names),
        mixer_out=_fused(fetch, [b + "attn_output.weight"])[0].weight,
        q_norm=_vector(fetch_vec, b + "attn_q_norm.weight"),
        k_norm=_vector(fetch_vec, b + "attn_k_norm.weight"),
        att_index=att_index,
        **common,
    )


def _common(fetch: Fetch, fetch_vec: Callable[[str], np.ndarray], b: str) -> dict[str, Any]:
    """What every block has: its two norms and the FFN."""
    ffn_in, interleaved = _gate_up(fetch, b)
    return dict(
        attn_norm=_vector(fetch_vec, b + "attn_norm.weight"),
        post_norm=_vector(fetch_vec, b + "post_attention_norm.weight"),
        ffn_in=ffn_in,
        ffn_down=_fused(fetch, [b + "ffn_down.weight"])[0].weight,
        ffn_interleaved=interleaved,
    )


def _mtp_head(dims: Dims, fetch: Fetch, fetch_vec: Callable[[str], np.ndarray], n_att: int, shared: tuple[GpuWeight, Any, GpuWeight]) -> MtpHead | None:  # fmt: skip
    """The first MTP block, or None when the file has none."""
    if dims.n_nextn < 1:
        return None
    b = f"blk.{len(dims.recurrent)}."
    embed, output_norm, output = shared

    def optional(name: str, fallback: Any, vector: bool = False) -> Any:
        try:
            return _vector(fetch_vec, name) if vector else _fused(fetch, [name])[0].weight
        except KeyError:
            return fallback

    return MtpHead(
        block=_attention_layer(fetch, fetch_vec, b, n_att, _common(fetch, fetch_vec, b)),
        eh_proj=_fused(fetch, [b + "nextn.eh_proj.weight"])[0].weight,
        enorm=_vector(fetch_vec, b + "nextn.enorm.weight"),
        hnorm=_vector(fetch_vec, b + "nextn.hnorm.weight"),
        head_norm=optional(b + "nextn.shared_head_norm.weight", output_norm, vector=True),
        embed=optional(b + "nextn.embed_tokens.weight", embed),
        head=optional(b + "nextn.shared_head_head.weight", output),
    )


def build_model(dims: Dims, fetch: Fetch, fetch_vec: Callable[[str], np.ndarray], mtp: bool = True) -> CudaModel:  # fmt: skip
    import cupy as cp

    layers: list[Layer] = []
    ssm_a: list[np.ndarray] = []
    dt_bias: list[np.ndarray] = []
    ssm_norm: list[np.ndarray] = []
    for i, rec in enumerate(dims.recurrent):
        b = f"blk.{i}."
        common = _common(fetch, fetch_vec, b)
        if rec:
            names = [
                b + n
                for n in (
                    "attn_qkv.weight",
                    "attn_gate.weight",
                    "ssm_beta.weight",
                    "ssm_alpha.weight",
                )
            ]
            conv = fetch_vec(b + "ssm_conv1d.weight").reshape(-1, 4)
            layer = Layer(
                True,
                mixer_in=_fused(fetch, names),
                mixer_out=_fused(fetch, [b + "ssm_out.weight"])[0].weight,
                conv_w=cp.asarray(np.ascontiguousarray(conv, dtype=np.float32)),
                dn_index=len(ssm_a),
                **common,
            )
            ssm_a.append(fetch_vec(b + "ssm_a"))
            dt_bias.append(fetch_vec(b + "ssm_dt.bias"))
            ssm_norm.append(fetch_vec(b + "ssm_norm.weight"))
        else:
            n_att = sum(1 for lay in layers if not lay.recurrent)
            layer = _attention_layer(fetch, fetch_vec, b, n_att, common)
        layers.append(layer)

    def stack(vs: list[np.ndarray]) -> Any:
        return cp.asarray(np.stack(vs).astype(np.float32)) if vs else cp.zeros((1, 1), cp.float32)

    token_embd = _fused(fetch, ["token_embd.weight"])[0].weight
    output_norm = _vector(fetch_vec, "output_norm.weight")
    output = _fused(fetch, ["output.weight"])[0].weight
    n_att = sum(1 for lay in layers if not lay.recurrent)
    shared = (token_embd, output_norm, output)
    return CudaModel(
        dims=dims,
        token_embd=token_embd,
        output_norm=output_norm,
        output=output,
        layers=layers,
        ssm_a=stack(ssm_a),
        dt_bias=stack(dt_bias),
        ssm_norm=stack(ssm_norm),
        mtp=_mtp_head(dims, fetch, fetch_vec, n_att, shared) if mtp else None,
    )


def from_gguf(gguf: Any) -> CudaModel:
    """Upload a GGUFModel (engine/gguf_file.py). Raises WeightFormatError for unusable tensors."""

    def fetch(name: str) -> tuple[int, int, int, Any]:
        info = gguf.tensors[name]
        cols, rows = int(info.shape[0]), int(np.prod(info.shape[1:]))
        return info.ggml_type, rows, cols, np.asarray(gguf.raw(name))

    def fetch_vec(name: str) -> np.ndarray:
        return np.asarray(gguf.dequantize(name), dtype=np.float32).reshape(-1)

    return build_model(Dims.of(gguf.config), fetch, fetch_vec)


def random_model(preset: str = "27b", quant: str = "q4_k_m", seed: int = 0, mtp: bool = False) -> CudaModel:  # fmt: skip
    """Random weights of a synthetic preset made on the GPU (weights of random blocks, norms
    near 1, decays in range): the full 27B shape without a file."""
    from engine.synthetic_plan import PRESETS, tensor_specs, tensor_type

    p = PRESETS[preset]
    specs = {s.name: s for s in tensor_specs(p)}
    rng = np.random.default_rng(seed)

    def fetch(name: str) -> tuple[int, int, int, Any]:
        spec = specs[name]
        t = tensor_type(spec, p, quant)
        rows, cols = spec.shape
        return t, rows, cols, weights.random_block_bytes(t, rows, cols, seed + len(name) + rows)

    def fetch_vec(name: str) -> np.ndarray:
        n = int(np.prod(specs[name].shape))
        if name.endswith("ssm_a"):
            return -np.exp(rng.standard_normal(n)).astype(np.float32)
        if "conv1d" in name or name.endswith("dt.bias"):
            return (rng.standard_normal(n) * 0.3).astype(np.float32)
        return (1 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    return build_model(Dims.of(p), fetch, fetch_vec, mtp)
