"""A fast, memory-mapped reader of the GGUF container (spec 2.1): metadata and tensor records.

`gguf.GGUFReader` builds a numpy view per array element, which takes seconds on a 248,320-token
vocabulary; this reader walks the header once with `struct` on the mapped bytes and keeps string
arrays lazy (decoded on first use), so a 27B file opens in milliseconds. It only parses the
container; `engine.gguf_file` validates the model.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# GGUF value type ids (spec 2.1)
T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL = range(8)
T_STRING, T_ARRAY, T_UINT64, T_INT64, T_FLOAT64 = 8, 9, 10, 11, 12

SCALAR_DTYPES: dict[int, str] = {
    T_UINT8: "<u1", T_INT8: "<i1", T_UINT16: "<u2", T_INT16: "<i2", T_UINT32: "<u4",
    T_INT32: "<i4", T_FLOAT32: "<f4", T_BOOL: "<u1", T_UINT64: "<u8", T_INT64: "<i8",
    T_FLOAT64: "<f8",
}  # fmt: skip
SCALAR_STRUCT: dict[int, str] = {
    T_UINT8: "<B", T_INT8: "<b", T_UINT16: "<H", T_INT16: "<h", T_UINT32: "<I", T_INT32: "<i",
    T_FLOAT32: "<f", T_BOOL: "<B", T_UINT64: "<Q", T_INT64: "<q", T_FLOAT64: "<d",
}  # fmt: skip


class HeaderError(ValueError):
    """The bytes are not a well-formed GGUF container (message says where and why)."""


class LazyStrings(Sequence[str]):
    """A GGUF string array, decoded from the mapped file on first access."""

    def __init__(self, buf: memoryview, offset: int, count: int) -> None:
        self._buf, self._offset, self._count = buf, offset, count
        self._items: list[str] | None = None

    def _decode(self) -> list[str]:
        if self._items is None:
            items, pos, buf = [], self._offset, self._buf
            for _ in range(self._count):
                (n,) = struct.unpack_from("<Q", buf, pos)
                items.append(bytes(buf[pos + 8 : pos + 8 + n]).decode("utf-8", errors="replace"))
                pos += 8 + n
            self._items = items
        return self._items

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> list[str]: ...
    def __getitem__(self, index: int | slice) -> str | list[str]:
        return self._decode()[index]

    def __iter__(self) -> Iterator[str]:
        return iter(self._decode())

    def __repr__(self) -> str:
        return f"LazyStrings(count={self._count})"


@dataclass(frozen=True)
class MetaValue:
    """A metadata value with its GGUF type (element type for arrays), for faithful copying."""

    value: Any
    vtype: int
    subtype: int | None = None


@dataclass(frozen=True)
class TensorRecord:
    name: str
    shape: tuple[int, ...]  # ggml order, ne0 first
    ggml_type: int
    rel_offset: int  # relative to the start of the data section


@dataclass(frozen=True)
class Header:
    version: int
    metadata: dict[str, MetaValue]
    tensors: list[TensorRecord]
    data_offset: int  # absolute offset of the data section
    alignment: int


class _Cursor:
    """Sequential little-endian reads over the mapped file, with truncation checks."""

    def __init__(self, buf: memoryview) -> None:
        self.buf, self.pos = buf, 0

    def take(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.buf):
            raise HeaderError(
                f"truncated header: need {size} bytes at offset {self.pos}, file has {len(self.buf)}"
            )
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return value

    def skip(self, n: int) -> int:
        start = self.pos
        if n < 0 or start + n > len(self.buf):
            raise HeaderError(
                f"truncated header: need {n} bytes at offset {start}, file has {len(self.buf)}"
            )
        self.pos += n
        return start

    def string(self) -> str:
        n = self.take("<Q")
        start = self.skip(n)
        try:
            return bytes(self.buf[start : start + n]).decode("utf-8")
        except UnicodeDecodeError as err:
            raise HeaderError(f"invalid UTF-8 string at offset {start}") from err

    def skip_strings(self, count: int) -> None:
        buf, pos, end = self.buf, self.pos, len(self.buf)
        for _ in range(count):
            if pos + 8 > end:
                raise HeaderError(
                    f"truncated header: string array runs past the end at offset {pos}"
                )
            pos += 8 + int.from_bytes(buf[pos : pos + 8], "little")
        if pos > end:
            raise HeaderError("truncated header: string array runs past the end of the file")
        self.pos = pos


def _read_value(cur: _Cursor, vtype: int) -> MetaValue:
    if vtype == T_STRING:
        return MetaValue(cur.string(), vtype)
    if vtype in SCALAR_DTYPES:
        value = cur.take(SCALAR_STRUCT[vtype])
        return MetaValue(bool(value) if vtype == T_BOOL else value, vtype)
    if vtype == T_ARRAY:
        subtype, count = cur.take("<I"), cur.take("<Q")
        if subtype == T_STRING:
            start = cur.pos
            cur.skip_strings(count)
            return MetaValue(LazyStrings(cur.buf, start, count), vtype, subtype)
        if subtype not in SCALAR_DTYPES:
            raise HeaderError(f"unsupported array element type {subtype} at offset {cur.pos}")
        dtype = np.dtype(SCALAR_DTYPES[subtype])
        start = cur.skip(count * dtype.itemsize)
        values = np.frombuffer(cur.buf, dtype=dtype, count=count, offset=start)
        return MetaValue(values.astype(bool) if subtype == T_BOOL else values, vtype, subtype)
    raise HeaderError(f"unknown metadata value type {vtype} at offset {cur.pos}")


def parse_header(buf: memoryview) -> Header:
    """Parse magic, version, metadata and tensor records of a GGUF file mapped in `buf`."""
    cur = _Cursor(buf)
    if len(buf) < 4 or bytes(buf[:4]) != GGUF_MAGIC:
        raise HeaderError(f"not a GGUF file (magic {bytes(buf[:4])!r}, expected {GGUF_MAGIC!r})")
    cur.pos = 4
    version = cur.take("<I")
    if version not in (2, 3):
        raise HeaderError(f"unsupported GGUF version {version} (supported: 2, 3)")
    n_tensors, n_kv = cur.take("<Q"), cur.take("<Q")
    if n_tensors > len(buf) // 24 or n_kv > len(buf) // 12:
        raise HeaderError(
            f"implausible counts ({n_tensors} tensors, {n_kv} keys) for a {len(buf)}-byte file"
        )
    metadata: dict[str, MetaValue] = {}
    for _ in range(n_kv):
        key = cur.string()
        metadata[key] = _read_value(cur, cur.take("<I"))
    tensors = []
    for _ in range(n_tensors):
        name = cur.string()
        n_dims = cur.take("<I")
        if not 1 <= n_dims <= 4:
            raise HeaderError(f"tensor {name!r} has {n_dims} dimensions (1-4 allowed)")
        shape = tuple(cur.take("<Q") for _ in range(n_dims))
        tensors.append(TensorRecord(name, shape, cur.take("<I"), cur.take("<Q")))
    align_value = metadata.get("general.alignment")
    alignment = int(align_value.value) if align_value is not None else DEFAULT_ALIGNMENT
    if alignment <= 0 or alignment & (alignment - 1):
        raise HeaderError(f"general.alignment {alignment} is not a power of two")
    data_offset = -(-cur.pos // alignment) * alignment
    return Header(version, metadata, tensors, data_offset, alignment)
