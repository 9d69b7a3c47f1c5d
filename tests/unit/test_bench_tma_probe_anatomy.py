"""bench/tma_probe.py's boundary anatomy (--set anatomy), on stamps made up here: the span splits
exactly into dependency, stream and tail, and an SM that ends last every time is named."""

from __future__ import annotations

import numpy as np

from bench import tma_probe


def _stamps(launches: int, ctas: int, late_sm: int, gap: int, lateness: int) -> np.ndarray:
    """Stamps of a chain of launches: each CTA streams 10 us after its launch's waits return,
    the CTA on `late_sm` `lateness` ns longer, and the next launch's waits return `gap` ns after
    the last end."""
    out = np.zeros((launches, ctas, tma_probe.STAMPS), dtype=np.uint64)
    start = 1_000_000  # the timer's origin is arbitrary
    for i in range(launches):
        sm = np.arange(ctas) % 8
        end = start + 10_000 + np.where(sm == late_sm, lateness, 0)
        out[i, :, 0] = start - 5_000  # resident 5 us before the wait returns
        out[i, :, 1] = start
        out[i, :, 2] = start + 700
        out[i, :, 3] = end
        out[i, :, 4] = sm
        start = int(end.max()) + gap
    return out


def test_span_splits_into_dependency_stream_and_tail() -> None:
    stamps = _stamps(launches=5, ctas=32, late_sm=3, gap=1_500, lateness=2_000)
    bw = 1e12
    a = tma_probe.boundary_anatomy(stamps, [8_000_000] * 5, bw)  # 8 us of bytes each
    assert a["launches"] == 5
    assert a["span_ms"] == a["dependency_ms"] + a["stream_ms"] + a["tail_ms"]
    assert a["span_ms"] == (5 * 12_000 + 4 * 1_500) / 1e6
    assert a["dependency_ms"] == 4 * 1_500 / 1e6
    assert a["tail_ms"] == 5 * 2_000 / 1e6
    assert a["floor_ms"] == 5 * 8_000 / 1e6
    per = a["per_launch_us"]
    assert per["dependency_median"] == 1.5
    assert per["stream_over_floor_median"] == 2.0
    assert per["first_round_after_wait_median"] == 0.7
    assert per["resident_before_wait_median"] == 5.0
    assert next(iter(a["sm_lateness_us"]["worst"])) == 3
    assert a["last_on_worst8"] == 1.0
    assert a["by_grid"] == {
        32: {"launches": 5, "share_us": 12.0 + 4 * 1.5 / 5, "tail_us": 2.0, "floor_us": 8.0}
    }


def test_persistent_late_sm_correlates_and_a_single_launch_has_no_boundary() -> None:
    rng = np.random.default_rng(0)
    stamps = _stamps(launches=6, ctas=64, late_sm=5, gap=1_000, lateness=3_000)
    stamps[..., 3] += rng.integers(0, 200, size=stamps.shape[:2]).astype(np.uint64)
    a = tma_probe.boundary_anatomy(stamps, [1_000_000] * 6, 1e12)
    assert a["lateness_corr"] > 0.9
    one = tma_probe.boundary_anatomy(stamps[:1], [1_000_000], 1e12)
    assert one["per_launch_us"]["dependency_median"] is None
    assert one["lateness_corr"] is None
