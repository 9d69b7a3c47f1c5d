"""Kernel launches that may overlap the kernel before them: programmatic dependent launch.

A decode step is hundreds of kernels, most of them weight products whose last wave leaves SMs idle
while the next product has not started. With the programmatic-stream-serialization attribute
(sm_90 and later) a kernel's CTAs are scheduled as soon as every CTA of the kernel before it
has released them (`oj_grid_dep` / `oj_grid_dep_early`, common.cuh); a product's CTAs then
start their weight loads, which depend on no earlier kernel, and wait for the earlier
kernel's results. CuPy's RawKernel cannot set
launch attributes, so `Kernel` launches through the driver's `cuLaunchKernelEx` (ctypes) when
the attribute is on, and through CuPy otherwise (older GPUs, OPENJET_PDL=0): same kernels,
same arguments, same results. Only launches onto a capturing stream take the attribute (see
Kernel.__call__); they become graph nodes with programmatic edges.
"""

from __future__ import annotations

import ctypes
import os
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


# one attribute for every overlapped launch (the driver copies it at launch)
_PDL_ATTR = ctypes.pointer(_LaunchAttribute(id=_ATTR_PROGRAMMATIC_STREAM_SERIALIZATION, value=1))


class LaunchFailed(RuntimeError):
    """The driver refused a launch; the message carries its error name."""


def arg_word(arg: Any) -> int:
    """The 8-byte parameter slot a kernel argument fills, as an int: a device pointer for a
    CuPy array, the value's bits for a NumPy scalar (the launchers pass every scalar as one,
    e.g. np.int32; the driver reads only the parameter's own size from its slot)."""
    kind = type(arg)
    if kind is np.int32:
        return int(arg) & 0xFFFFFFFF
    if kind is np.float32:
        return int(arg.view(np.uint32))
    if isinstance(arg, np.generic):
        if arg.itemsize > 8:
            raise TypeError(f"kernel argument of {arg.itemsize} bytes")
        return int.from_bytes(arg.tobytes(), "little")
    ptr = getattr(getattr(arg, "data", None), "ptr", None)
    if isinstance(ptr, int):
        return ptr
    raise TypeError(f"kernel argument of type {type(arg).__name__}: pass a cupy array or np scalar")


def pack_args(args: tuple[Any, ...]) -> tuple[Any, Any]:
    """(buffer, void*[] into it): one 8-byte slot per argument, the form cuLaunchKernelEx reads
    kernelParams in (it copies them at launch, so the buffer may go right after)."""
    n = max(1, len(args))
    buf = (ctypes.c_uint64 * n)(*map(arg_word, args))
    base = ctypes.addressof(buf)
    return buf, (ctypes.c_void_p * n)(*range(base, base + 8 * n, 8))


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
        import cupy as cp

        # overlap only in captured graphs: direct launches are bound by the host's ~8 us per
        # launch, where the driver path's extra Python would cost more than the overlap saves
        # (and without the attribute no launch asks the stream at all)
        stream = cp.cuda.get_current_stream() if pdl_enabled() else None
        if stream is None or not stream.is_capturing():
            self.fn(grid, block, args, shared_mem=shared_mem)
            return
        cfg = _LaunchConfig(_dim3(grid), _dim3(block), shared_mem, stream.ptr, _PDL_ATTR, 1)
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
