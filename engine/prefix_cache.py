"""Prefix reuse and eviction policy: which slot a prompt goes to, from which saved state it
starts, where its prefill saves checkpoints, and what is evicted when the KV pool runs short.

A prompt starts from the longest of (a) an idle slot whose live tokens are a prefix of it, or
(b) a saved checkpoint that is; the last prompt token always runs, as its logits are needed.
With no live match the least recently used idle slot (an empty one first) is taken and the
checkpoint, if any, restored into it. Eviction frees idle slots' caches and checkpoints, least
recently used first; active slots are never touched here.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.backend import Backend
from engine.scheduler_plan import SlotRecord
from engine.state import PrefixIndex, checkpoint_lengths


class PrefixCache:
    def __init__(self, backend: Backend, max_checkpoints: int) -> None:
        self.backend = backend
        self.index = PrefixIndex()
        # a backend may hold fewer (each costs a DeltaNet state copy in device memory)
        self.max_checkpoints = min(max_checkpoints, getattr(backend, "max_checkpoints", 1 << 30))
        self.evictions = 0

    def place(self, prompt: Sequence[int], idle: list[SlotRecord], now: float) -> SlotRecord:
        """Choose an idle slot for prompt and load the longest reusable prefix into it."""
        limit = len(prompt) - 1
        live = [s for s in idle if len(s.tokens) <= limit and s.tokens == prompt[: len(s.tokens)]]
        best_live = max(live, key=lambda s: len(s.tokens), default=None)
        saved = self.index.longest(prompt, limit)
        if best_live is not None and (saved is None or len(best_live.tokens) >= saved.length):
            best_live.last_used = now
            return best_live
        slot = min(idle, key=lambda s: (len(s.tokens) > 0, s.last_used))
        if saved is not None:
            self.backend.restore_checkpoint(slot.id, saved.checkpoint)
            self.index.touch(saved.checkpoint, now)
            slot.tokens = [int(t) for t in saved.tokens]
        else:
            self.backend.reset_slot(slot.id)
            slot.tokens = []
        slot.last_used = now
        return slot

    def cuts(
        self,
        prompt: Sequence[int],
        start: int,
        interval: int,
        boundaries: frozenset[int],
        min_gap: int,
    ) -> list[int]:
        """Where this prompt's prefill should save checkpoints (none already saved)."""
        saved = self.index.prefix_lengths(prompt)
        cuts = checkpoint_lengths(prompt, start, interval, boundaries, min_gap)
        return [c for c in cuts if c not in saved]

    def remember(self, saved: list[tuple[int, int]], prompt: Sequence[int], now: float) -> None:
        """Index the checkpoints a prefill step saved, then keep within the budget."""
        for length, checkpoint in saved:
            self.index.add(checkpoint, prompt[:length], now)
        excess = len(self.index) - self.max_checkpoints
        for old in self.index.least_recently_used()[: max(excess, 0)]:
            self.drop(old.checkpoint)

    def drop(self, checkpoint: int) -> None:
        self.index.remove(checkpoint)
        self.backend.free_checkpoint(checkpoint)

    def evict_idle(self, pages: int, slots: list[SlotRecord]) -> bool:
        """Free at least `pages` pages from idle caches, least recent first; False if impossible."""
        pool = self.backend.pool
        target = pool.free_pages + pages
        candidates: list[tuple[float, str, int]] = [
            (s.last_used, "slot", s.id) for s in slots if s.job is None and s.tokens
        ]
        candidates += [
            (c.last_used, "ckpt", c.checkpoint) for c in self.index.least_recently_used()
        ]
        for _, kind, key in sorted(candidates):
            if pool.free_pages >= target:
                break
            if kind == "slot":
                self.backend.reset_slot(key)
                slots[key].tokens = []
            else:
                self.drop(key)
            self.evictions += 1
        return pool.free_pages >= target
