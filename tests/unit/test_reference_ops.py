"""The reference's math pieces against independent formulations (float64, loops, complex numbers)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.reference_attention import causal_attention
from engine.reference_deltanet import DeltaNetShape, causal_conv_silu, delta_rule
from engine.reference_ops import l2_norm, rms_norm, rope_neox_partial, softplus

RNG = np.random.default_rng(1234)


def rand(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def test_rms_norm_matches_float64_formula() -> None:
    x, w = rand(5, 24), rand(24)
    expected = (
        x.astype(np.float64)
        / np.sqrt(np.mean(x.astype(np.float64) ** 2, axis=-1, keepdims=True) + 1e-6)
        * w
    )
    assert np.allclose(rms_norm(x, w, 1e-6), expected, rtol=1e-6, atol=1e-7)


def test_l2_norm_puts_eps_inside_the_root_without_dividing_by_n() -> None:
    x = np.full((1, 4), 1e-4, dtype=np.float32)  # Σx² = 4e-8, well below eps
    assert np.allclose(l2_norm(x, 1e-6), x / np.sqrt(4e-8 + 1e-6), rtol=1e-6)
    big = rand(3, 16)
    assert np.allclose(np.linalg.norm(l2_norm(big, 1e-6), axis=-1), 1.0, atol=1e-5)


def test_softplus_follows_ggml_threshold() -> None:
    x = np.array([-30.0, -1.0, 0.0, 19.9, 20.5, 80.0], dtype=np.float32)
    expected = np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))
    assert np.allclose(softplus(x), expected, rtol=1e-6)
    assert np.isfinite(softplus(np.array([1e4], dtype=np.float32))).all()


def test_partial_neox_rope_is_a_complex_rotation_of_the_first_dims() -> None:
    n_rot, dim, base = 8, 12, 1e7
    x, positions = rand(3, 2, dim), np.array([0, 5, 1234])
    out = rope_neox_partial(x, positions, n_rot, base)
    half = n_rot // 2
    freqs = base ** (-2.0 * np.arange(half) / n_rot)
    rotation = np.exp(1j * positions[:, None, None] * freqs)
    pairs = (x[..., :half] + 1j * x[..., half:n_rot]) * rotation
    assert np.allclose(out[..., :half], pairs.real, atol=2e-4)
    assert np.allclose(out[..., half:n_rot], pairs.imag, atol=2e-4)
    assert np.array_equal(out[..., n_rot:], x[..., n_rot:])  # the other dims pass through
    assert np.allclose(out[0], x[0], atol=0)  # position 0 does not rotate


def test_conv_state_carries_across_calls() -> None:
    channels, kernel = 6, 4
    taps, mix = rand(channels, kernel), rand(7, channels)
    whole, state_whole = causal_conv_silu(mix, np.zeros((kernel - 1, channels), np.float32), taps)
    state = np.zeros((kernel - 1, channels), np.float32)
    parts = []
    for chunk in (mix[:1], mix[1:4], mix[4:]):
        out, state = causal_conv_silu(chunk, state, taps)
        parts.append(out)
    assert np.allclose(np.concatenate(parts), whole, atol=1e-6)
    assert np.array_equal(state, state_whole)
    # Tap K−1 multiplies the current token: the first row sees only it.
    pre = mix[0] * taps[:, kernel - 1]
    assert np.allclose(whole[0], pre / (1 + np.exp(-pre)), atol=1e-6)


def chunked_delta_rule(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, beta: np.ndarray, gamma: np.ndarray
) -> np.ndarray:
    """One head, one chunk, zero initial state: the parallel form of spec 4.4g, in float64."""
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    n, dk = k.shape
    q = q / np.sqrt(dk)
    cum = np.cumsum(gamma.astype(np.float64))
    a = np.zeros((n, n))
    for t in range(n):
        for tau in range(t):
            a[t, tau] = beta[t] * np.exp(cum[t] - cum[tau]) * (k[t] @ k[tau])
    u = np.linalg.solve(np.eye(n) + a, beta[:, None] * v)
    o = np.zeros_like(v)
    for t in range(n):
        for tau in range(t + 1):
            o[t] += np.exp(cum[t] - cum[tau]) * (k[tau] @ q[t]) * u[tau]
    return o


def test_delta_rule_equals_the_chunked_parallel_form_with_tiled_heads() -> None:
    shape = DeltaNetShape(n_k_heads=2, n_v_heads=4, k_dim=8, v_dim=6, conv_kernel=4, eps=1e-6)
    steps = 9
    q = l2_norm(rand(steps, 2, 8), 1e-6)
    k = l2_norm(rand(steps, 2, 8), 1e-6)
    v = rand(steps, 4, 6)
    beta = 1 / (1 + np.exp(-rand(steps, 4)))
    gamma = -np.abs(rand(steps, 4, scale=0.5))
    state = np.zeros((4, 8, 6), np.float32)
    out = delta_rule(q, k, v, beta, gamma, state, shape)
    for j in range(4):
        g = j % 2  # tiled order: value head j reads key head j mod Hk
        expected = chunked_delta_rule(q[:, g], k[:, g], v[:, j], beta[:, j], gamma[:, j])
        assert np.allclose(out[:, j], expected, atol=1e-5), f"value head {j}"


def test_causal_attention_matches_a_per_head_loop() -> None:
    n_head, n_kv, dh, past, steps = 6, 2, 8, 3, 4
    q, keys, values = (
        rand(steps, n_head, dh),
        rand(past + steps, n_kv, dh),
        rand(past + steps, n_kv, dh),
    )
    out = causal_attention(q, keys, values, past, 0.25)
    for t in range(steps):
        for h in range(n_head):
            kv = h // (n_head // n_kv)
            visible = past + t + 1
            scores = keys[:visible, kv].astype(np.float64) @ q[t, h] * 0.25
            p = np.exp(scores - scores.max())
            p /= p.sum()
            assert np.allclose(out[t, h], p @ values[:visible, kv], atol=1e-5)


@pytest.mark.parametrize("n_rot", [4, 8])
def test_rope_is_relative(n_rot: int) -> None:
    # Rotating q and k by their positions leaves q·k dependent on the offset only.
    q, k = rand(1, 1, 8), rand(1, 1, 8)

    def score(pq: int, pk: int) -> float:
        rq = rope_neox_partial(q, np.array([pq]), n_rot, 1e4)
        rk = rope_neox_partial(k, np.array([pk]), n_rot, 1e4)
        return float((rq * rk).sum())

    assert score(10, 7) == pytest.approx(score(103, 100), rel=1e-4, abs=1e-5)
