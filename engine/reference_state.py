"""Per-sequence state of the qwen35 reference (spec section 5).

One `SequenceState` per sequence: a growable f32 KV cache per full-attention layer, the conv and
recurrent states per Gated DeltaNet layer, and the MTP block's own KV cache. Everything is f32,
as llama.cpp keeps it (spec 9.9); `copy()` makes an independent deep copy for checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

Array = np.ndarray


class KVCache:
    """Keys and values of one attention layer, appended row by row: [length, Hkv, Dh] each."""

    def __init__(self, n_head_kv: int, head_dim: int, capacity: int = 64) -> None:
        self._keys = np.zeros((capacity, n_head_kv, head_dim), dtype=np.float32)
        self._values = np.zeros((capacity, n_head_kv, head_dim), dtype=np.float32)
        self.length = 0

    @property
    def keys(self) -> Array:
        return self._keys[: self.length]

    @property
    def values(self) -> Array:
        return self._values[: self.length]

    def append(self, keys: Array, values: Array) -> None:
        """Add rows [T, Hkv, Dh]; the buffer doubles when full so appending one at a time is O(1)."""
        needed = self.length + keys.shape[0]
        if needed > self._keys.shape[0]:
            capacity = max(needed, 2 * self._keys.shape[0])
            self._keys = _grown(self._keys, capacity)
            self._values = _grown(self._values, capacity)
        self._keys[self.length : needed] = keys
        self._values[self.length : needed] = values
        self.length = needed

    def truncate(self, length: int) -> None:
        """Forget every row from `length` on (rollback of rejected positions)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a KV cache of {self.length} rows to {length}")
        self.length = length

    def copy(self) -> KVCache:
        clone = KVCache.__new__(KVCache)
        clone._keys = self._keys[: max(self.length, 1)].copy()
        clone._values = self._values[: max(self.length, 1)].copy()
        clone.length = self.length
        return clone


def _grown(buffer: Array, capacity: int) -> Array:
    bigger = np.zeros((capacity, *buffer.shape[1:]), dtype=buffer.dtype)
    bigger[: buffer.shape[0]] = buffer
    return bigger


@dataclass
class DeltaNetState:
    """One Gated DeltaNet layer: conv [K−1, channels] (pre-conv inputs, oldest first) and the
    recurrent matrices [Hv, Dk, Dv] indexed S[j][i][c] (i = key dim, c = value dim)."""

    conv: Array
    recurrent: Array

    def copy(self) -> DeltaNetState:
        return DeltaNetState(conv=self.conv.copy(), recurrent=self.recurrent.copy())


@dataclass
class SequenceState:
    """Everything one sequence carries between forward calls.

    `layers[ℓ]` is a KVCache for a full-attention layer and a DeltaNetState for a recurrent one.
    `n_past` counts trunk positions processed; `mtp_n_past` counts trunk hiddens the MTP head has
    consumed (its KV holds positions 0..mtp_n_past once it has run). `first_token` is the token
    at position 0, which the MTP head pairs with a zero hidden (spec 6.2).
    """

    layers: list[KVCache | DeltaNetState]
    mtp_kv: KVCache | None
    n_past: int = 0
    mtp_n_past: int = 0
    first_token: int | None = None

    def copy(self) -> SequenceState:
        return SequenceState(
            layers=[layer.copy() for layer in self.layers],
            mtp_kv=self.mtp_kv.copy() if self.mtp_kv is not None else None,
            n_past=self.n_past,
            mtp_n_past=self.mtp_n_past,
            first_token=self.first_token,
        )

    def truncate_mtp(self, mtp_n_past: int) -> None:
        """Drop MTP KV rows past position `mtp_n_past` (the draft region, spec 6.2 step 3)."""
        if not 0 <= mtp_n_past <= self.mtp_n_past:
            raise ValueError(
                f"cannot roll the MTP head back from {self.mtp_n_past} to {mtp_n_past}"
            )
        if self.mtp_kv is not None:
            self.mtp_kv.truncate(mtp_n_past + 1 if mtp_n_past > 0 else 0)
        self.mtp_n_past = mtp_n_past
