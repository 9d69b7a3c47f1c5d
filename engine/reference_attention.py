"""The gated full-attention mixer of the qwen35 reference (spec 4.5), f32 throughout.

All T rows of a call are computed together: the new keys and values are appended to the layer's
cache first, then every query row attends causally to the cache up to its own position.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from engine.reference_ops import linear, rms_norm, rope_neox_partial, sigmoid

if TYPE_CHECKING:
    from engine.gguf_file import Qwen35Config
    from engine.reference_state import KVCache
    from engine.reference_weights import AttentionWeights

Array = np.ndarray


@dataclass(frozen=True)
class AttentionShape:
    n_head: int  # Hq
    n_head_kv: int  # Hkv
    head_dim: int  # Dh
    n_rot: int  # rotated dims per head (rope.dimension_count)
    freq_base: float
    scale: float  # attention.scale, 1/sqrt(Dh) when absent
    eps: float

    @classmethod
    def from_config(cls, config: Qwen35Config) -> AttentionShape:
        return cls(
            n_head=config.n_head,
            n_head_kv=config.n_head_kv,
            head_dim=config.head_dim,
            n_rot=config.rope_n_rot,
            freq_base=config.rope_freq_base,
            scale=config.attention_scale,
            eps=config.rms_eps,
        )


def project_qkv(
    a: Array, weights: AttentionWeights, shape: AttentionShape
) -> tuple[Array, Array, Array, Array]:
    """a [T, E] -> Q [T, Hq, Dh], gate G [T, Hq·Dh], K, V [T, Hkv, Dh] (spec 4.5a, b).

    The q projection is per head [query | gate]; Q and K get their per-head RMSNorm here.
    """
    n_rows, dh = a.shape[0], shape.head_dim
    qg = linear(a, weights.q).reshape(n_rows, shape.n_head, 2 * dh)
    q = rms_norm(qg[:, :, :dh], weights.q_norm, shape.eps)
    gate = np.ascontiguousarray(qg[:, :, dh:]).reshape(n_rows, shape.n_head * dh)
    k = linear(a, weights.k).reshape(n_rows, shape.n_head_kv, dh)
    v = linear(a, weights.v).reshape(n_rows, shape.n_head_kv, dh)
    return q, gate, rms_norm(k, weights.k_norm, shape.eps), v


def causal_attention(q: Array, keys: Array, values: Array, first_pos: int, scale: float) -> Array:
    """softmax(Q·Kᵀ·scale, causal) · V with GQA (spec 4.5d).

    q [T, Hq, Dh] at positions first_pos..; keys, values [L, Hkv, Dh] with L = first_pos + T.
    Query head h reads KV head h // (Hq/Hkv). Returns [T, Hq, Dh].
    """
    n_rows, n_head, dh = q.shape
    n_kv = keys.shape[1]
    group = n_head // n_kv
    qg = q.reshape(n_rows, n_kv, group, dh).transpose(1, 2, 0, 3)  # [Hkv, g, T, Dh]
    k = keys.transpose(1, 2, 0)[:, None]  # [Hkv, 1, Dh, L]
    scores = (qg @ k) * np.float32(scale)  # [Hkv, g, T, L]
    query_pos = first_pos + np.arange(n_rows)[:, None]
    future = np.arange(keys.shape[0])[None, :] > query_pos  # [T, L]
    scores = np.where(future, -np.inf, scores).astype(np.float32)
    scores -= scores.max(axis=-1, keepdims=True)
    probs = np.exp(scores)
    probs /= probs.sum(axis=-1, keepdims=True)
    out = probs @ values.transpose(1, 0, 2)[:, None]  # [Hkv, g, T, Dh]
    return np.asarray(out.transpose(2, 0, 1, 3).reshape(n_rows, n_head, dh), dtype=np.float32)


def attention_mixer(
    a: Array, weights: AttentionWeights, cache: KVCache, shape: AttentionShape
) -> Array:
    """The whole gated attention mixer: normed input a [T, E] -> m [T, E] (spec 4.5a–e).

    Rows sit at positions cache.length .. cache.length + T − 1; their K and V join the cache.
    """
    first_pos = cache.length
    positions = np.arange(first_pos, first_pos + a.shape[0])
    q, gate, k, v = project_qkv(a, weights, shape)
    q = rope_neox_partial(q, positions, shape.n_rot, shape.freq_base)
    k = rope_neox_partial(k, positions, shape.n_rot, shape.freq_base)
    cache.append(k, v)
    o = causal_attention(q, cache.keys, cache.values, first_pos, shape.scale)
    y = o.reshape(a.shape[0], shape.n_head * shape.head_dim) * sigmoid(gate)
    return linear(y, weights.out)
