"""Sequence-state bookkeeping shared by every backend: the paged KV pool and the prefix cache.

`PagedKVPool` hands out fixed-size pages of attention KV to *owners* — slots (int ids) and
checkpoints (`("ckpt", id)`) — so one slot can use most of the pool while others stay short.
Pages are reference-counted: a checkpoint shares the pages of the slot it was taken from, and a
slot restored from a checkpoint shares the checkpoint's. A page may be appended to only by its
*writer* and only at offsets at or after its *sealed* offset (the longest checkpoint inside it);
any other append copies the page first (copy-on-write, returned as `CopyOp`s for the backend to
execute on its KV buffers), so a slot never overwrites what a neighbour or a checkpoint holds.

`PrefixIndex` remembers which token prefixes the saved checkpoints hold (DeltaNet state cannot be
truncated, so reuse always starts from a checkpoint or a slot's full live state), and
`checkpoint_lengths` says where a prompt's prefill should stop to save one: every
`interval` tokens, at chat-message boundaries, and one token before the prompt's end.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from engine.backend import BackendError

Owner = Hashable


class PoolExhausted(BackendError):
    """The KV pool has not enough free pages for what was asked."""

    def __init__(self, needed_tokens: int, free_tokens: int) -> None:
        super().__init__(
            f"KV pool exhausted: {needed_tokens} more tokens needed, {free_tokens} free"
        )
        self.needed_tokens = needed_tokens
        self.free_tokens = free_tokens


@dataclass(frozen=True)
class CopyOp:
    """Copy the first n_tokens rows of KV page src into page dst (copy-on-write)."""

    src: int
    dst: int
    n_tokens: int


@dataclass
class _Table:
    pages: list[int] = field(default_factory=list)
    length: int = 0


class PagedKVPool:
    """Page accounting for a KV pool of n_pages × page_size token rows (all layers)."""

    def __init__(self, n_tokens: int, page_size: int = 16) -> None:
        if page_size < 1 or n_tokens < page_size:
            raise ValueError(f"a KV pool needs at least one page ({n_tokens=}, {page_size=})")
        self.page_size = page_size
        self.n_pages = n_tokens // page_size
        self._refs = [0] * self.n_pages
        self._writer: list[Owner | None] = [None] * self.n_pages
        self._sealed = [0] * self.n_pages
        self._free = list(range(self.n_pages - 1, -1, -1))  # pop() takes the lowest page
        self._tables: dict[Owner, _Table] = {}
        # per owner, a stamp that changes whenever its page list does (not its length): a
        # backend re-uploads only the tables whose stamp moved since its last upload
        self._stamps: dict[Owner, int] = {}
        self._clock = 0

    @property
    def total_tokens(self) -> int:
        return self.n_pages * self.page_size

    @property
    def free_pages(self) -> int:
        return len(self._free)

    @property
    def free_tokens(self) -> int:
        return len(self._free) * self.page_size

    @property
    def used_tokens(self) -> int:
        return (self.n_pages - len(self._free)) * self.page_size

    def length(self, owner: Owner) -> int:
        table = self._tables.get(owner)
        return table.length if table else 0

    def pages(self, owner: Owner) -> list[int]:
        """The owner's page table: page ids in position order."""
        table = self._tables.get(owner)
        return list(table.pages) if table else []

    def revision(self, owner: Owner) -> int:
        """A number that changes whenever the owner's page list changes (0: never had pages)."""
        return self._stamps.get(owner, 0)

    def _touch(self, owner: Owner) -> None:
        self._clock += 1
        self._stamps[owner] = self._clock

    def owners(self) -> list[Owner]:
        return list(self._tables)

    def exclusive_pages(self, owner: Owner) -> int:
        """Pages that releasing this owner would return to the pool."""
        table = self._tables.get(owner)
        return sum(1 for p in table.pages if self._refs[p] == 1) if table else 0

    def pages_needed(self, owner: Owner, new_length: int) -> int:
        """Fresh pages that growing the owner to new_length takes (copy-on-write included)."""
        table = self._tables.get(owner) or _Table()
        if new_length <= table.length:
            return 0
        new_pages = -(-new_length // self.page_size) - len(table.pages)
        return new_pages + (1 if self._needs_copy(owner, table) else 0)

    def extend(self, owner: Owner, new_length: int) -> list[CopyOp]:
        """Grow the owner to new_length rows; raises PoolExhausted (changing nothing) if the
        pages are not there. Returns the page copies the backend must do before writing."""
        needed = self.pages_needed(owner, new_length)
        if needed > len(self._free):
            raise PoolExhausted(needed * self.page_size, self.free_tokens)
        table = self._tables.setdefault(owner, _Table())
        if new_length <= table.length:
            return []
        copies: list[CopyOp] = []
        if self._needs_copy(owner, table):
            old = table.pages[-1]
            new = self._take(owner)
            copies.append(CopyOp(old, new, table.length % self.page_size))
            table.pages[-1] = new
            self._drop(old, owner)
        elif table.pages and table.length % self.page_size:
            self._claim(table.pages[-1], owner)
        grown = len(table.pages) * self.page_size < new_length
        while len(table.pages) * self.page_size < new_length:
            table.pages.append(self._take(owner))
        table.length = new_length
        if copies or grown:
            self._touch(owner)
        return copies

    def truncate(self, owner: Owner, new_length: int) -> None:
        """Forget rows from new_length on (rollback); whole pages past it go back to the pool."""
        table = self._tables.get(owner)
        if table is None or new_length > table.length or new_length < 0:
            raise ValueError(
                f"cannot truncate {owner!r} of length {self.length(owner)} to {new_length}"
            )
        keep = -(-new_length // self.page_size)
        if keep < len(table.pages):
            self._touch(owner)
        for page in table.pages[keep:]:
            self._drop(page, owner)
        del table.pages[keep:]
        table.length = new_length

    def share(self, src: Owner, dst: Owner) -> None:
        """Make dst hold exactly src's rows by sharing its pages (checkpoint save or restore)."""
        source = self._tables.get(src) or _Table()
        pages, length = list(source.pages), source.length
        for page in pages:
            self._refs[page] += 1
        self.release(dst)
        self._tables[dst] = _Table(pages, length)
        self._touch(dst)
        if pages and length % self.page_size:
            last = pages[-1]
            self._sealed[last] = max(self._sealed[last], length % self.page_size)

    def release(self, owner: Owner) -> None:
        table = self._tables.pop(owner, None)
        if table:
            self._touch(owner)
            for page in table.pages:
                self._drop(page, owner)

    def _needs_copy(self, owner: Owner, table: _Table) -> bool:
        offset = table.length % self.page_size
        if not table.pages or offset == 0:
            return False
        page = table.pages[-1]
        if self._refs[page] == 1:
            return False
        return self._writer[page] != owner or offset < self._sealed[page]

    def _claim(self, page: int, owner: Owner) -> None:
        if self._refs[page] == 1:
            self._sealed[page] = 0
        self._writer[page] = owner

    def _take(self, owner: Owner) -> int:
        page = self._free.pop()
        self._refs[page] = 1
        self._writer[page] = owner
        self._sealed[page] = 0
        return page

    def _drop(self, page: int, owner: Owner) -> None:
        self._refs[page] -= 1
        if self._writer[page] == owner:
            self._writer[page] = None
        if self._refs[page] == 0:
            self._writer[page] = None
            self._sealed[page] = 0
            self._free.append(page)


def common_prefix_length(a: Sequence[int] | np.ndarray, b: Sequence[int] | np.ndarray) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    left = np.asarray(a[:n], dtype=np.int64)
    right = np.asarray(b[:n], dtype=np.int64)
    differ = np.flatnonzero(left != right)
    return int(differ[0]) if differ.size else n


@dataclass
class SavedPrefix:
    """A checkpoint's tokens (its state covers exactly these) and when it was last useful."""

    checkpoint: int
    tokens: np.ndarray  # int32 [length]
    last_used: float

    @property
    def length(self) -> int:
        return int(self.tokens.shape[0])


class PrefixIndex:
    """Saved checkpoints by token prefix: the longest one a prompt starts with, LRU order."""

    def __init__(self) -> None:
        self._saved: dict[int, SavedPrefix] = {}

    def __len__(self) -> int:
        return len(self._saved)

    def add(self, checkpoint: int, tokens: Sequence[int], now: float) -> None:
        self._saved[checkpoint] = SavedPrefix(checkpoint, np.asarray(tokens, np.int32), now)

    def remove(self, checkpoint: int) -> None:
        self._saved.pop(checkpoint, None)

    def get(self, checkpoint: int) -> SavedPrefix:
        return self._saved[checkpoint]

    def touch(self, checkpoint: int, now: float) -> None:
        self._saved[checkpoint].last_used = now

    def prefix_lengths(self, prompt: Sequence[int] | np.ndarray) -> set[int]:
        """Lengths of the checkpoints whose tokens are a prefix of prompt."""
        tokens = np.asarray(prompt, dtype=np.int64)
        return {
            s.length
            for s in self._saved.values()
            if common_prefix_length(s.tokens, tokens) == s.length
        }

    def holds(self, tokens: Sequence[int]) -> bool:
        """True when some checkpoint covers exactly these tokens."""
        return any(
            s.length == len(tokens) and common_prefix_length(s.tokens, tokens) == s.length
            for s in self._saved.values()
        )

    def longest(self, prompt: Sequence[int] | np.ndarray, max_length: int) -> SavedPrefix | None:
        """The checkpoint with the longest prefix of prompt, no longer than max_length."""
        best: SavedPrefix | None = None
        for saved in self._saved.values():
            if saved.length > max_length or (best and saved.length <= best.length):
                continue
            if common_prefix_length(saved.tokens, prompt) == saved.length:
                best = saved
        return best

    def least_recently_used(self, exclude: Iterable[int] = ()) -> list[SavedPrefix]:
        skip = set(exclude)
        found = [s for s in self._saved.values() if s.checkpoint not in skip]
        return sorted(found, key=lambda s: s.last_used)


def checkpoint_lengths(
    prompt: Sequence[int],
    start: int,
    interval: int,
    boundary_tokens: frozenset[int] = frozenset(),
    min_gap: int = 64,
) -> list[int]:
    """Slot lengths in (start, len(prompt)) at which prefill should save a checkpoint.

    Every multiple of `interval`; before each message-start token (e.g. `<|im_start|>`) at least
    `min_gap` after the previous cut, so a shared system prompt or an unchanged conversation head
    is reusable; and len(prompt) - 1, so the same prompt again (or a follow-up) reuses all but
    the last token (whose logits must be computed anew).
    """
    end = len(prompt)
    cuts: set[int] = {k for k in range(interval, end, interval) if k > start}
    last = start
    tokens = np.asarray(prompt[start + 1 :], dtype=np.int64)
    marks = np.flatnonzero(np.isin(tokens, list(boundary_tokens))) + start + 1
    for position in marks.tolist():
        if position - last >= min_gap:
            cuts.add(position)
            last = position
    if end - 1 > start:
        cuts.add(end - 1)
    return sorted(cuts)
