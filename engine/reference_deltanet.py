"""The Gated DeltaNet mixer of the qwen35 reference (spec 4.4), one function per step of the math.

Projections, the conv and the gates are computed for all T rows at once; the delta-rule
recurrence runs token by token (the exact sequential form 4.4e, vectorised over value heads), so
any chunking of a prompt gives the same result to f32 rounding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from engine.reference_ops import l2_norm, linear, rms_norm, sigmoid, silu, softplus
from engine.reference_state import DeltaNetState

if TYPE_CHECKING:
    from engine.gguf_file import Qwen35Config
    from engine.reference_weights import DeltaNetWeights

Array = np.ndarray


@dataclass(frozen=True)
class DeltaNetShape:
    n_k_heads: int  # Hk (ssm.group_count)
    n_v_heads: int  # Hv (ssm.time_step_rank)
    k_dim: int  # Dk (ssm.state_size)
    v_dim: int  # Dv (ssm.inner_size / Hv)
    conv_kernel: int  # K
    eps: float

    @classmethod
    def from_config(cls, config: Qwen35Config) -> DeltaNetShape:
        return cls(
            n_k_heads=config.ssm_n_k_heads,
            n_v_heads=config.ssm_n_v_heads,
            k_dim=config.ssm_d_state,
            v_dim=config.ssm_d_inner // config.ssm_n_v_heads,
            conv_kernel=config.ssm_conv_kernel,
            eps=config.rms_eps,
        )

    @property
    def conv_channels(self) -> int:
        return 2 * self.n_k_heads * self.k_dim + self.n_v_heads * self.v_dim


def new_deltanet_state(shape: DeltaNetShape) -> DeltaNetState:
    """Zero conv and recurrent states: the start of a sequence."""
    conv = np.zeros((shape.conv_kernel - 1, shape.conv_channels), dtype=np.float32)
    recurrent = np.zeros((shape.n_v_heads, shape.k_dim, shape.v_dim), dtype=np.float32)
    return DeltaNetState(conv=conv, recurrent=recurrent)


def causal_conv_silu(mix: Array, conv_state: Array, taps: Array) -> tuple[Array, Array]:
    """Depthwise causal conv + SiLU (spec 4.4b).

    mix [T, C] (pre-conv projections), conv_state [K−1, C] (previous inputs, oldest first),
    taps [C, K] (tap K−1 multiplies the current token) -> (u [T, C], new conv_state [K−1, C]).
    """
    kernel = taps.shape[1]
    window = np.concatenate([conv_state, mix], axis=0)  # [K−1+T, C]
    n_rows = mix.shape[0]
    conv = np.zeros_like(mix)
    for k in range(kernel):
        conv += window[k : k + n_rows] * taps[:, k]
    return silu(conv), window[n_rows:].copy()


def split_qkv(u: Array, shape: DeltaNetShape) -> tuple[Array, Array, Array]:
    """u [T, C] -> q, k [T, Hk, Dk] (L2-normalised per head) and v [T, Hv, Dv] (spec 4.4c)."""
    n_rows = u.shape[0]
    key_width = shape.n_k_heads * shape.k_dim
    q = u[:, :key_width].reshape(n_rows, shape.n_k_heads, shape.k_dim)
    k = u[:, key_width : 2 * key_width].reshape(n_rows, shape.n_k_heads, shape.k_dim)
    v = u[:, 2 * key_width :].reshape(n_rows, shape.n_v_heads, shape.v_dim)
    return l2_norm(q, shape.eps), l2_norm(k, shape.eps), v


def gates(a_proj: Array, b_proj: Array, weights: DeltaNetWeights) -> tuple[Array, Array]:
    """β = sigmoid(b) and the log-decay γ = ssm_a · softplus(α + dt_bias), both [T, Hv] (4.4d)."""
    beta = sigmoid(b_proj)
    gamma = np.asarray(weights.a * softplus(a_proj + weights.dt_bias), dtype=np.float32)
    return beta, gamma


def delta_rule(
    q: Array, k: Array, v: Array, beta: Array, gamma: Array, state: Array, shape: DeltaNetShape
) -> Array:
    """The delta-rule recurrence (spec 4.4e), token by token; updates `state` in place.

    q, k [T, Hk, Dk]; v [T, Hv, Dv]; beta, gamma [T, Hv]; state [Hv, Dk, Dv] -> o [T, Hv, Dv].
    Value head j reads key/query head j mod Hk (the GGUF's tiled head order, spec 3.5).
    """
    key_head = np.arange(shape.n_v_heads) % shape.n_k_heads
    scale = np.float32(1.0 / np.sqrt(shape.k_dim))
    q_heads = q[:, key_head, :] * scale  # [T, Hv, Dk]
    k_heads = k[:, key_head, :]  # [T, Hv, Dk]
    decay = np.exp(gamma).astype(np.float32)  # [T, Hv]
    out = np.empty((q.shape[0], shape.n_v_heads, shape.v_dim), dtype=np.float32)
    for t in range(q.shape[0]):
        state *= decay[t][:, None, None]  # decay first
        kt = k_heads[t][:, None, :]  # [Hv, 1, Dk]
        recalled = (kt @ state)[:, 0, :]  # Sᵀk: [Hv, Dv]
        delta = beta[t][:, None] * (v[t] - recalled)  # β(v − Sᵀk)
        state += k_heads[t][:, :, None] * delta[:, None, :]  # S += k δᵀ
        out[t] = (q_heads[t][:, None, :] @ state)[:, 0, :]  # read out with the updated S
    return out


def deltanet_mixer(
    a: Array, weights: DeltaNetWeights, state: DeltaNetState, shape: DeltaNetShape
) -> Array:
    """The whole Gated DeltaNet layer mixer: normed input a [T, E] -> m [T, E] (spec 4.4a–f)."""
    n_rows = a.shape[0]
    mix = linear(a, weights.qkv)
    z = linear(a, weights.z).reshape(n_rows, shape.n_v_heads, shape.v_dim)
    beta, gamma = gates(linear(a, weights.alpha), linear(a, weights.beta), weights)
    u, state.conv = causal_conv_silu(mix, state.conv, weights.conv)
    q, k, v = split_qkv(u, shape)
    o = delta_rule(q, k, v, beta, gamma, state.recurrent, shape)
    y = rms_norm(o, weights.norm, shape.eps) * silu(z)  # gated RMSNorm per head
    return linear(y.reshape(n_rows, shape.n_v_heads * shape.v_dim), weights.out)
