"""bench/decode.py's per-op figures, on the CPU with stand-in launchers: `breakdown` gives what
leaving each kind of op out of a step saves, `alone` each kind's own time with every other kind
left out, and both put every launcher back."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from bench import decode
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
