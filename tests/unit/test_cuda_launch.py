"""engine/cuda/launch.py on the CPU: kernel parameters packed as cuLaunchKernelEx reads them, and
the rule that makes overlapped launches safe — every kernel waits for the kernel before it
(common.cuh `oj_grid_dep`) before any return and before touching an activation."""

from __future__ import annotations

import ctypes
import re
import struct
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from engine.cuda import launch

CUDA_DIR = Path(launch.__file__).parent


def _device_array(ptr: int) -> SimpleNamespace:
    return SimpleNamespace(data=SimpleNamespace(ptr=ptr))  # what a cupy array exposes


def test_arguments_are_packed_at_aligned_offsets() -> None:
    args = (_device_array(0x7F00_0000_1000), np.int32(-3), np.float32(1.5), np.uint64(7))
    buf, ptrs = launch.pack_args(args)
    base = ctypes.addressof(buf)
    assert [ptrs[i] - base for i in range(4)] == [0, 8, 16, 24]
    raw = ctypes.string_at(base, 32)
    assert struct.unpack_from("<Q", raw, 0)[0] == 0x7F00_0000_1000
    assert struct.unpack_from("<i", raw, 8)[0] == -3
    assert struct.unpack_from("<f", raw, 16)[0] == 1.5
    assert struct.unpack_from("<Q", raw, 24)[0] == 7


def test_a_python_int_is_refused_not_guessed() -> None:
    with pytest.raises(TypeError, match="np scalar"):
        launch.arg_word(3)


def test_the_launch_structures_have_the_driver_layout() -> None:
    # cuda.h: CUlaunchAttribute is 72 bytes (8 + a 64-byte union), CUlaunchConfig 56
    assert ctypes.sizeof(launch._LaunchAttribute) == 72
    assert launch._LaunchAttribute.value.offset == 8
    assert ctypes.sizeof(launch._LaunchConfig) == 56
    assert launch._LaunchConfig.stream.offset == 32


def _body(text: str, open_brace: int) -> str:
    depth = 0
    for i in range(open_brace, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[open_brace + 1 : i]
    raise AssertionError("unbalanced braces")


def _device_function_bodies(text: str) -> dict[str, str]:
    out = {}
    for m in re.finditer(r"OJ_DEV void (\w+)\s*\(", text):
        out[m.group(1)] = _body(text, text.index("{", m.end()))
    return out


def _first_statement(body: str) -> str:
    return body.replace("\\\n", "\n").strip().split(";")[0].strip()


def test_every_kernel_waits_for_the_one_before_it_first() -> None:
    """A kernel's first statement is oj_grid_dep() or oj_grid_dep_early(), or a call of a
    device function that issues only loads of what no kernel of the step has written yet (the
    products' weights, the DeltaNet recurrence's state) before oj_grid_dep() and has no return
    before it."""
    text = "\n".join(p.read_text() for p in sorted(CUDA_DIR.glob("*.cu")))
    devices = _device_function_bodies(text)
    kernels = list(re.finditer(r'extern "C" __global__', text))
    assert len(kernels) >= 15
    for m in kernels:
        body = _body(text, text.index("{", m.end()))
        head = re.findall(r"(\w+)\s*\(", text[m.end() : m.end() + 200])
        name = next(n for n in head if n != "__launch_bounds__")
        first = _first_statement(body)
        if first in ("oj_grid_dep()", "oj_grid_dep_early()"):
            continue
        calls = [c for c in re.findall(r"(\w+)\s*<", body) if c in devices]
        assert calls, f"kernel {name} does not start with oj_grid_dep()"
        callee = devices[calls[0]]
        wait = callee.find("oj_grid_dep();")
        assert wait >= 0, f"{calls[0]} never calls oj_grid_dep()"
        before = callee[:wait]
        assert "return" not in before, f"{calls[0]} may return before oj_grid_dep()"
        # only pointer arithmetic on the activations (X) and outputs (Y) before the wait
        touched = re.sub(r"\b([XY]) (=|\+=) [^;]*;", "", before)
        assert re.search(r"\b[XY]\b", touched) is None, f"{calls[0]} uses X/Y before the wait"
