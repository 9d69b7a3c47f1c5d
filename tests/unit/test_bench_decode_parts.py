"""bench/decode.py's parts on the CPU with stand-ins: the per-op figures (`breakdown` gives what
leaving each kind of op out of a step saves, `alone` each kind's own time with every other kind
left out, and both put every launcher back), and the step layouts' sampling parameters."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from bench import decode
from engine.backend import SamplingParams
from engine.cuda import kernels

COSTS = {
    "matmul": 5.0, "matmul_swiglu": 1.0, "matmul_pair": 0.5, "embed": 0.125,
    "dn_conv": 0.25, "dn_recur": 0.5, "attn_prep": 0.125, "attention": 0.375,
    "rmsnorm": 0.25, "swiglu": 0.0625, "sample": 0.0625,
}  # fmt: skip
MODULE_LEVEL = ("matmul", "matmul_swiglu", "matmul_pair", "embed")  # engine.cuda.kernels
KINDS = {
    "weight products": 6.5,
    "deltanet conv+recurrence": 0.75,
    "attention prep+core": 0.5,
    "norms+swiglu+embed": 0.4375,
    "sampling": 0.0625,
}


def test_breakdown_and_alone_time_each_kind_of_op(monkeypatch: pytest.MonkeyPatch) -> None:
    spent: list[float] = []

    def launcher(name: str) -> Any:
        return lambda *args, **kwargs: spent.append(COSTS[name])

    ops = SimpleNamespace(**{n: launcher(n) for n in COSTS if n not in MODULE_LEVEL})
    for name in MODULE_LEVEL:
        monkeypatch.setattr(kernels, name, launcher(name))
    backend = SimpleNamespace(fwd=SimpleNamespace(ops=ops))

    def owner(name: str) -> Any:
        return kernels if name in MODULE_LEVEL else ops

    originals = {n: getattr(owner(n), n) for n in COSTS}

    def timed() -> float:  # one "step": every launcher once, looked up at call time
        spent.clear()
        for name in COSTS:
            getattr(owner(name), name)()
        return sum(spent)

    full = sum(COSTS.values())
    parts = decode.breakdown(timed, backend)
    assert parts.pop("full step") == full
    assert parts == KINDS
    assert decode.alone(timed, backend) == KINDS
    for name, fn in originals.items():  # every launcher put back
        assert getattr(owner(name), name) is fn


def test_dims_settings_time_the_defaults_first_unless_named() -> None:
    """--dims dn_cb=16 alone once timed no baseline (v29e); the defaults now come first."""
    assert decode.dims_settings("dn_cb=16") == ["", "dn_cb=16"]
    assert decode.dims_settings("dn_cb=16,att_splits=32") == ["", "dn_cb=16", "att_splits=32"]
    assert decode.dims_settings(",dn_cb=16") == ["", "dn_cb=16"]
    assert decode.dims_settings("dn_cb=16,") == ["dn_cb=16", ""]


class _DeviceArray(np.ndarray):
    """A numpy stand-in for the workspace's CuPy arrays: `set` copies a host array in."""

    def set(self, value: np.ndarray) -> None:
        self[...] = value


def _fake_step_backend(max_rows: int = 16, slots: int = 8) -> Any:
    def dev(shape: tuple[int, ...], dtype: Any = np.int32) -> _DeviceArray:
        return np.zeros(shape, dtype).view(_DeviceArray)

    ws = SimpleNamespace(
        row_tok=dev((max_rows,)), row_pos=dev((max_rows,)), row_slot=dev((max_rows,)),
        row_first=dev((max_rows,)), seg=dev((5, slots)), sample_idx=dev((max_rows,)),
        fparams=dev((max_rows, 8), np.float32), iparams=dev((max_rows, 4)),
        pen_off=dev((max_rows + 1,)), page_table=dev((slots, 64)), t_save=64,
    )  # fmt: skip
    ops = SimpleNamespace(dims=SimpleNamespace(att_core_below=2048))
    return SimpleNamespace(
        ws=ws,
        pool=SimpleNamespace(page_size=16, total_tokens=16 * 512),
        forget_page_table=lambda: None,
        fwd=SimpleNamespace(ops=ops),
    )


def test_step_layout_draws_greedily_or_as_the_sampling_says() -> None:
    """decode.py's sampled steps (v37) write each sampled row's parameters; the others draw
    greedily (temperature 0), also after a sampled step set them."""
    backend = _fake_step_backend()
    ws = backend.ws
    ws.pen_off[:] = 7  # stale penalty offsets: the step has no penalties
    lay = decode.step_layout(backend, [2] * 3, 512, 2, SamplingParams())
    assert (lay.n_rows, lay.n_seg, lay.n_sample) == (6, 3, 6)
    np.testing.assert_allclose(ws.fparams[:6, :3], [[0.8, 0.95, 0.05]] * 6)
    assert ws.iparams[:6, 0].tolist() == [40] * 6
    assert ws.iparams[:6, 3].tolist() == list(range(6))  # each row its own draw counter
    assert ws.pen_off[:7].tolist() == [0] * 7
    decode.step_layout(backend, [1] * 4, 512, 1)
    assert ws.fparams[:4, 0].tolist() == [0.0] * 4
