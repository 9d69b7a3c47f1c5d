"""Kernel launches that may overlap the kernel before them: programmatic dependent launch.

A decode step is ~700 kernels, most of them weight products whose last wave leaves SMs idle
while the next product has not started. With the programmatic-stream-serialization attribute
(sm_90 and later) a kernel's CTAs are scheduled as soon as every CTA of the kernel before it
has passed `oj_grid_dep()` (common.cuh); they start their weight loads, which depend on no
earlier kernel, and wait there for the earlier kernel's results. CuPy's RawKernel cannot set
launch attributes, so `Kernel` launches through the driver's `cuLaunchKernelEx` (ctypes) when
the attribute is on, and through CuPy otherwise (older GPUs, OPENJET_PDL=0): same kernels,
same arguments, same results. Launches on a capturing stream become graph nodes with
programmatic edges, so captured steps keep the overlap.
"""

from __future__ import annotations

import ctypes
import os
import struct
from functools import cache
from typing import Any

import numpy as np

# cuda.h: CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
_ATTR_PROGRAMMATIC_STREAM_SERIALIZATION = 6
MIN_ARCH = 90  # griddepcontrol: sm_90 and later (common.cuh compiles it out below)


class _LaunchAttribute(ctypes.Structure):
    """CUlaunchAttribute: an id, padding to 8 bytes, a 64-byte value union (here an int)."""

    _fields_ = [
        ("id", ctypes.c_int),
        ("pad", ctypes.c_char * 4),
        ("value", ctypes.c_int),
        ("value_pad", ctypes.c_char * 60),
    ]


class _LaunchConfig(ctypes.Structure):
    """CUlaunchConfig."""

    _fields_ = [
        ("grid", ctypes.c_uint * 3),
        ("block", ctypes.c_uint * 3),
        ("shared_mem", ctypes.c_uint),
        ("stream", ctypes.c_void_p),
        ("attrs", ctypes.POINTER(_LaunchAttribute)),
        ("n_attrs", ctypes.c_uint),
    ]


class LaunchFailed(RuntimeError):
    """The driver refused a launch; the message carries its error name."""


def arg_bytes(arg: Any) -> bytes:
    """The bytes a kernel parameter holds for `arg`: a device pointer for a CuPy array, the
    value for a NumPy scalar (the launchers pass every scalar as one, e.g. np.int32)."""
    if isinstance(arg, np.generic):
        return arg.tobytes()
    data = getattr(arg, "data", None)
    ptr = getattr(data, "ptr", None)
    if isinstance(ptr, int):
        return struct.pack("<Q", ptr)
    raise TypeError(f"kernel argument of type {type(arg).__name__}: pass a cupy array or np scalar")


def pack_args(args: tuple[Any, ...]) -> tuple[ctypes.Array[ctypes.c_char], Any]:
    """(buffer, void*[] into it): each argument's bytes at its own 8-byte-aligned offset, the
    form cuLaunchKernelEx reads kernelParams in (it copies them at launch)."""
    blobs = [arg_bytes(a) for a in args]
    offsets, size = [], 0
    for blob in blobs:
        offsets.append(size)
        size += -(-len(blob) // 8) * 8
    buf = ctypes.create_string_buffer(b"".join(b.ljust(-(-len(b) // 8) * 8, b"\0") for b in blobs))
    base = ctypes.addressof(buf)
    ptrs = (ctypes.c_void_p * max(1, len(args)))(*[base + o for o in offsets])
    return buf, ptrs


def _dim3(v: Any) -> tuple[int, int, int]:
    x, y, z, *_ = (*(int(d) for d in (v if isinstance(v, tuple | list) else (v,))), 1, 1, 1)
    return x, y, z


@cache
def _driver() -> Any:
    lib = ctypes.CDLL("libcuda.so.1")
    fn = lib.cuLaunchKernelEx
    fn.argtypes = [
        ctypes.POINTER(_LaunchConfig),
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_void_p),
        ctypes.c_void_p,
    ]
    fn.restype = ctypes.c_int
    return lib


def _error_name(lib: Any, code: int) -> str:
    name = ctypes.c_char_p()
    lib.cuGetErrorName(code, ctypes.byref(name))
    return (name.value or b"?").decode()


_override: bool | None = None


def set_pdl(on: bool | None) -> None:
    """Force programmatic dependent launch on or off (benchmarks, tests); None: the default.
    Graphs captured before keep the launches they were captured with."""
    global _override
    _override = on


@cache
def _pdl_default() -> bool:
    if os.environ.get("OPENJET_PDL", "1") == "0":
        return False
    try:
        from engine.cuda.build import detected_arch

        if detected_arch() < MIN_ARCH:
            return False
        _driver().cuLaunchKernelEx  # noqa: B018  (the symbol exists from CUDA 12.0 on)
    except (OSError, AttributeError):
        return False
    return True


def pdl_enabled() -> bool:
    return _pdl_default() if _override is None else _override


class Kernel:
    """One compiled kernel, called like a CuPy Function: kernel(grid, block, args)."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn  # a cupy RawKernel; its .kernel is the loaded CUfunction's wrapper
        self.handle = 0

    def _handle(self) -> int:
        if not self.handle:
            self.handle = int(self.fn.kernel.ptr)  # loads the module's code on first use
        return self.handle

    def __call__(self, grid: Any, block: Any, args: tuple[Any, ...], shared_mem: int = 0) -> None:
        if not pdl_enabled():
            self.fn(grid, block, args, shared_mem=shared_mem)
            return
        import cupy as cp

        attr = _LaunchAttribute(id=_ATTR_PROGRAMMATIC_STREAM_SERIALIZATION, value=1)
        cfg = _LaunchConfig(
            grid=(ctypes.c_uint * 3)(*_dim3(grid)),
            block=(ctypes.c_uint * 3)(*_dim3(block)),
            shared_mem=shared_mem,
            stream=cp.cuda.get_current_stream().ptr,
            attrs=ctypes.pointer(attr),
            n_attrs=1,
        )
        _buf, ptrs = pack_args(args)
        lib = _driver()
        code = lib.cuLaunchKernelEx(ctypes.byref(cfg), self._handle(), ptrs, None)
        if code != 0:
            raise LaunchFailed(f"cuLaunchKernelEx: {_error_name(lib, code)}")


_kernels: dict[tuple[int, str], tuple[Any, Kernel]] = {}


def kernel(module: Any, name: str) -> Kernel:
    """`name` from a cupy.RawModule, as a Kernel (cached; the cache holds the module, so its
    id stays its own)."""
    key = (id(module), name)
    if key not in _kernels:
        _kernels[key] = (module, Kernel(module.get_function(name)))
    return _kernels[key][1]
