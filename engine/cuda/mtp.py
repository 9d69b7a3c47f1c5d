"""The MTP head on the GPU: its catch-up over the trunk's accepted rows and its greedy drafts.

The same proposals as engine/reference_backend.py's (spec 6), kept differently: the head's KV (one
more attention slab of the pool, under the slots' page tables) holds a row for every position
p below a slot's length — token p with the trunk's normed hidden of position p - 1 (zeros for
p = 0) — written right after each pass for the rows it accepted, so a slot keeps only its last
trunk hidden (`ws.mtp_pending`), however long its prompt. Drafting then runs the head on the
sampled token at the slot's length with that hidden, and on each draft with the head's own
output, one launch sequence per draft. Those KV rows lie past the slot's length: their pages are
borrowed from the pool for the drafts and given back, and the next catch-up overwrites the row
at the slot's length with the same values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from engine.cuda.forward import Forward, Workspace
from engine.state import PagedKVPool, PoolExhausted


@dataclass(frozen=True)
class Span:
    """A pass's accepted rows of one slot: `tokens` at positions `pos`.., trunk rows `row`.. of
    the pass (their normed hiddens in ws.a)."""

    slot: int
    row: int
    pos: int
    tokens: tuple[int, ...]


@dataclass(frozen=True)
class Want:
    """Drafts wanted after the sampled `token`, which sits at position `pos` (the slot's length)."""

    slot: int
    token: int
    pos: int
    n: int


class MtpDrafter:
    """Runs the MTP head of `fwd`'s model over a Workspace. `borrow(slot, length)` makes the
    slot's pages cover `length` positions (page copies done, page table on the device) and
    raises PoolExhausted when the pool cannot; the drafts give them back with
    `pool.truncate`."""

    def __init__(
        self,
        ws: Workspace,
        fwd: Forward,
        pool: PagedKVPool,
        borrow: Callable[[int, int], None],
    ) -> None:
        self.ws, self.fwd, self.pool, self.borrow = ws, fwd, pool, borrow

    def reset(self, slot: int) -> None:
        """A fresh sequence: position 0's row takes a zero hidden."""
        self.ws.mtp_pending[slot] = 0

    def catch_up(self, spans: list[Span]) -> None:
        """Write the head's KV rows for the spans' positions (token p with the hidden of p - 1)
        and leave each slot's pending hidden at its span's last row."""
        ws = self.ws
        spans = [s for s in spans if s.tokens]
        if not spans:
            return
        o = 0
        for s in spans:  # hidden inputs first: ws.a is the trunk's until the head runs
            n = len(s.tokens)
            ws.mtp_hidden[o] = ws.mtp_pending[s.slot]
            if n > 1:
                ws.mtp_hidden[o + 1 : o + n] = ws.a[s.row : s.row + n - 1]
            o += n
        for s in spans:
            ws.mtp_pending[s.slot] = ws.a[s.row + len(s.tokens) - 1]
        tokens = [t for s in spans for t in s.tokens]
        positions = [s.pos + i for s in spans for i in range(len(s.tokens))]
        slots = [s.slot for s in spans for _ in s.tokens]
        self._run(tokens, positions, slots, 0)

    def drafts(
        self, wants: list[Want], lengths: dict[int, int], n_ctx: int
    ) -> dict[int, list[int]]:
        """Greedy drafts for each want (none where the pool cannot lend the pages; no draft row
        at or past position n_ctx); lengths: each slot's real length, restored in the pool
        afterwards."""
        import cupy as cp

        ws = self.ws
        out: dict[int, list[int]] = {}
        active: list[Want] = []
        for want in wants:
            w = Want(want.slot, want.token, want.pos, min(want.n, n_ctx - want.pos))
            if w.n <= 0:
                continue
            try:
                self.borrow(w.slot, w.pos + w.n)
            except PoolExhausted:
                continue
            out[w.slot] = []
            active.append(w)
        try:
            for i, w in enumerate(active):
                ws.mtp_hidden[i] = ws.mtp_pending[w.slot]
            tokens = [w.token for w in active]
            step = 0
            while active:
                A = len(active)
                self._run(tokens, [w.pos + step for w in active], [w.slot for w in active], A)
                drawn = cp.argmax(ws.logits[:A], axis=1).astype(cp.int32).get().tolist()
                for w, token in zip(active, drawn, strict=True):
                    out[w.slot].append(int(token))
                keep = [i for i, w in enumerate(active) if len(out[w.slot]) < w.n]
                if keep:  # the next draft reads the head's own output of this one
                    ws.mtp_hidden[: len(keep)] = ws.a[cp.asarray(keep, dtype=cp.int32)]
                active = [active[i] for i in keep]
                tokens = [drawn[i] for i in keep]
                step += 1
        finally:
            for slot in out:
                self.pool.truncate(slot, lengths[slot])
        return out

    def _run(self, tokens: list[int], positions: list[int], slots: list[int], M: int) -> None:
        """The head over these rows; logits for the first M of them."""
        ws, h = self.ws, self.ws.host_meta()
        T = len(tokens)
        h.row_tok[:T], h.row_pos[:T], h.row_slot[:T] = tokens, positions, slots
        h.sample_idx[:M] = np.arange(M, dtype=np.int32)
        ws.upload_meta()
        self.fwd.mtp_block(T, M)
