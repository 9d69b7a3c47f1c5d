"""Elementwise and normalisation math of the qwen35 reference (spec sections 0, 4.2, 4.5c, 4.6).

Every function takes and returns float32 arrays, as llama.cpp keeps all activations in f32.
Rows are the leading axes; the last axis is the one a norm or a projection works on.
"""

from __future__ import annotations

import numpy as np

Array = np.ndarray

# ggml's softplus returns x unchanged above this threshold (CPU and CUDA).
SOFTPLUS_THRESHOLD = 20.0


def linear(x: Array, weight: Array) -> Array:
    """y = x · Wᵀ: x [..., in], weight [out, in] (ggml {in, out}) -> [..., out]."""
    return np.asarray(x @ weight.T, dtype=np.float32)


def rms_norm(x: Array, weight: Array, eps: float) -> Array:
    """x / sqrt(mean(x²) + eps) ⊙ weight over the last axis.

    The sum of squares is accumulated in float64 like ggml's CPU kernel; the scale is then applied
    in f32. Weights are used as stored (the converter already folded in HF's +1).
    """
    mean_square = np.mean(np.square(x, dtype=np.float64), axis=-1, keepdims=True)
    scale = (1.0 / np.sqrt(mean_square.astype(np.float32) + np.float32(eps))).astype(np.float32)
    return np.asarray(x * scale * weight, dtype=np.float32)


def l2_norm(x: Array, eps: float) -> Array:
    """x / sqrt(Σx² + eps) over the last axis (eps inside the root, not divided by n; spec 4.2)."""
    sum_square = np.sum(np.square(x, dtype=np.float64), axis=-1, keepdims=True)
    scale = (1.0 / np.sqrt(sum_square.astype(np.float32) + np.float32(eps))).astype(np.float32)
    return np.asarray(x * scale, dtype=np.float32)


def sigmoid(x: Array) -> Array:
    return np.asarray(1.0 / (1.0 + np.exp(-x)), dtype=np.float32)


def silu(x: Array) -> Array:
    return np.asarray(x * sigmoid(x), dtype=np.float32)


def softplus(x: Array) -> Array:
    """log(1 + eˣ), and x itself above 20 as ggml does."""
    safe = np.minimum(x, SOFTPLUS_THRESHOLD)
    return np.asarray(np.where(x > SOFTPLUS_THRESHOLD, x, np.log1p(np.exp(safe))), dtype=np.float32)


def swiglu_ffn(x: Array, gate: Array, up: Array, down: Array) -> Array:
    """down · (silu(gate · x) ⊙ (up · x)) (spec 4.6): x [T, E] -> [T, E]."""
    return linear(silu(linear(x, gate)) * linear(x, up), down)


def rope_angles(positions: Array, n_rot: int, freq_base: float) -> Array:
    """θ[t, i] = p_t · base^(−2i/n_rot) for the n_rot/2 rotary pairs -> [T, n_rot/2] float32.

    ggml's CPU kernel builds the powers by repeated f32 multiplication; doing the same keeps our
    angles bit-identical to its angles at large positions.
    """
    step = np.float32(freq_base) ** np.float32(-2.0 / n_rot)
    theta = np.asarray(positions, dtype=np.float32).copy()
    angles = np.empty((theta.shape[0], n_rot // 2), dtype=np.float32)
    for i in range(n_rot // 2):
        angles[:, i] = theta
        theta = (theta * step).astype(np.float32)
    return angles


def rope_neox_partial(x: Array, positions: Array, n_rot: int, freq_base: float) -> Array:
    """Rotate the first n_rot dims of every head with NeoX pairing (i, i + n_rot/2); spec 4.5c.

    x [T, H, D], positions [T] -> [T, H, D]. Dims n_rot.. pass through. For text tokens the IMROPE
    sections all see the same position, so this plain partial NeoX rotation is exact.
    """
    half = n_rot // 2
    angles = rope_angles(positions, n_rot, freq_base)[:, None, :]  # [T, 1, half]
    cos = np.cos(angles).astype(np.float32)
    sin = np.sin(angles).astype(np.float32)
    first, second = x[..., :half], x[..., half:n_rot]
    out = x.copy()
    out[..., :half] = first * cos - second * sin
    out[..., half:n_rot] = first * sin + second * cos
    return out


def log_softmax(logits: Array) -> Array:
    """Row-wise log-softmax in float64 (for comparisons; the model itself never needs it)."""
    z = np.asarray(logits, dtype=np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    return np.asarray(z - np.log(np.exp(z).sum(axis=-1, keepdims=True)))


def kl_rows(exact: Array, other: Array) -> Array:
    """KL(softmax(exact) ‖ softmax(other)) of each row of logits, in nats (for comparisons)."""
    lp, lq = log_softmax(exact), log_softmax(other)
    return np.asarray(np.sum(np.exp(lp) * (lp - lq), axis=-1))


def top2_gap(logits: Array) -> Array:
    """Each row's largest logit less its second largest (how clear its top-1 is)."""
    top2 = np.sort(logits, axis=-1)[..., -2:]
    return np.asarray(top2[..., 1] - top2[..., 0])
