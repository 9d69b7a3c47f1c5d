"""CudaBackend: the backend contract of engine/backend.py on an NVIDIA GPU.

All slots' rows of a step share one weight pass (engine/cuda/forward.py), replayed as a CUDA
graph per row layout. Tokens are drawn on the device; the host reads back only the sampled ids
and checks the drafts (sample and match: the emitted token is always the one drawn at its row,
so speculation keeps the distribution; greedy reproduces plain decoding exactly). Rollback: a
decode group with drafts does not write its DeltaNet state during the pass; after verification
the accepted rows are replayed from the untouched state (one launch over all layers), attention
KV past the accepted rows is simply dropped from the page table. With an MTP head in the file,
the head catches up on each pass's accepted rows and proposes the `n_draft` drafts a step asks
for (engine/cuda/mtp.py); without one `drafts` stay empty (the scheduler may draft by prompt
lookup).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.backend import (  # fmt: skip
    BackendError,
    Launched,
    MemoryInfo,
    RowKind,
    SlotResult,
    SlotStep,
    StepPlan,
    StepResult,
    check_follow,
    check_plan,
)
from engine.cuda.forward import (
    PENALTY_SLOTS,
    Forward,
    Layout,
    Workspace,
    penalty_lists,
    sampling_rows,
)
from engine.cuda.kernels import Ops
from engine.cuda.memory import kv_bytes_per_token, kv_tokens_that_fit
from engine.cuda.model import CudaModel
from engine.cuda.mtp import MtpDrafter, Span, Want
from engine.state import PagedKVPool, PoolExhausted

MAX_SAMPLE_ROWS = 64


@dataclass
class _Queued:
    """A pass queued on the device: what reading it back needs (`_finish`)."""

    seg: np.ndarray
    sample_rows: list[tuple[SlotStep, int, int]]  # (step, row in step, row in pass)
    logits: np.ndarray | None = None  # debug passes read theirs back at once

    @property
    def n_sample(self) -> int:
        return len(self.sample_rows)


@dataclass
class _InFlight:
    """A launched step (`CudaBackend.launch`): its pass, the pinned buffer its drawn tokens are
    copied to and the event that says they are there."""

    started: float
    group: list[tuple[SlotStep, int, int]]
    queued: _Queued
    drawn: Any  # pinned int32 [max_sample] (Workspace.drawn_host)
    copied: Any  # cupy Event


class CudaBackend:
    kind = "megakernel"

    # the row kernels take activation rows in n-tiles of 8 (matmul.cu): a step of 17 rows runs
    # the 3-tile kernel, as slow as 24 rows (bench/NOTES.md, v12-v13 step times)
    row_quantum = 8
    overlaps_host_work = True  # step(plan, while_running=...): see engine/backend.py

    def __init__(self, model: CudaModel, tokenizer: Any = None, chat_template: Any = None, model_name: str = "model", n_slots: int = 4, kv_tokens: int | None = None, page_size: int = 16, max_rows: int = 512, use_graphs: bool = True, use_mtp: bool = True) -> None:  # fmt: skip
        if not 1 <= n_slots <= 8:
            raise BackendError(f"the CUDA backend runs 1..8 slots, not {n_slots}")
        self.model, self.tokenizer, self.chat_template = model, tokenizer, chat_template
        self.model_name, self.n_slots, self.max_rows = model_name, n_slots, max_rows
        self.n_vocab = model.dims.n_vocab
        # the MTP head runs (catch-up on every pass, drafts when asked) if the file has one and
        # the caller wants MTP drafts at all (`openjet serve --speculation off` does not)
        self.has_mtp = model.mtp is not None and use_mtp
        self.use_graphs = use_graphs
        if kv_tokens is None:
            kv_tokens = self._tokens_that_fit(model, n_slots, page_size, max_rows)
        self._pool = PagedKVPool(kv_tokens, page_size)
        self.n_ctx = min(model.dims.context_length, self._pool.total_tokens)
        self.ws = Workspace(model, n_slots, kv_tokens, page_size, max_rows, MAX_SAMPLE_ROWS)
        self.fwd = Forward(model, self.ws, Ops(model.dims.kernel_dims(page_size)))
        self._mtp = (
            MtpDrafter(self.ws, self.fwd, self._pool, self._borrow) if self.has_mtp else None
        )
        self._lengths = [0] * n_slots
        self._table = np.zeros(self.ws.page_table.shape, np.int32)  # what the device holds
        self._table_revision = [-1] * n_slots  # the pool revision of each slot's uploaded list
        self._checkpoints: dict[int, tuple[Any, Any, int, Any]] = {}  # rec, conv, length, MTP
        self._next_checkpoint = 1
        self._turn = 0  # launch-ahead: the Workspace.drawn_host buffer of the last launch

    @staticmethod
    def _tokens_that_fit(model: CudaModel, n_slots: int, page_size: int, max_rows: int) -> int:
        """The KV pool's default size: what the memory left after the weights and the step's
        buffers holds (measured with every buffer but the pool allocated)."""
        import cupy as cp

        probe = Workspace(model, n_slots, page_size, page_size, max_rows, MAX_SAMPLE_ROWS)
        free = int(cp.cuda.runtime.memGetInfo()[0])
        del probe  # its blocks stay in CuPy's pool for the real workspace
        per_token = kv_bytes_per_token(model.dims, model.n_attention_slabs)
        return kv_tokens_that_fit(free, per_token, n_slots * model.dims.context_length)

    @classmethod
    def from_gguf(cls, path: str | Path, **options: Any) -> CudaBackend:
        from engine.chat import ChatTemplate
        from engine.cuda.model import from_gguf
        from engine.gguf_file import open_gguf
        from engine.tokenizer import Tokenizer

        gguf = open_gguf(path)
        return cls(
            from_gguf(gguf),
            Tokenizer.from_gguf(gguf),
            ChatTemplate.from_gguf(gguf),
            Path(path).name,
            **options,
        )

    @property
    def pool(self) -> PagedKVPool:
        return self._pool

    # -- slot state ----------------------------------------------------------------------------

    def _checked(self, slot: int) -> int:
        if not 0 <= slot < self.n_slots:
            raise BackendError(f"no slot {slot} (backend has {self.n_slots})")
        return slot

    def slot_length(self, slot: int) -> int:
        return self._lengths[self._checked(slot)]

    def reset_slot(self, slot: int) -> None:
        self._checked(slot)
        self.ws.rec[:, slot] = 0
        self.ws.conv[:, slot] = 0
        if self._mtp:
            self._mtp.reset(slot)
        self._lengths[slot] = 0
        self._pool.release(slot)

    def save_checkpoint(self, slot: int) -> int:
        self._checked(slot)
        ident = self._next_checkpoint
        self._next_checkpoint += 1
        pending = self.ws.mtp_pending[slot].copy() if self._mtp else None
        self._checkpoints[ident] = (
            self.ws.rec[:, slot].copy(),
            self.ws.conv[:, slot].copy(),
            self._lengths[slot],
            pending,
        )
        self._pool.share(slot, ("ckpt", ident))
        return ident

    def restore_checkpoint(self, slot: int, checkpoint: int) -> None:
        self._checked(slot)
        if checkpoint not in self._checkpoints:
            raise BackendError(f"no checkpoint {checkpoint}")
        rec, conv, length, pending = self._checkpoints[checkpoint]
        self.ws.rec[:, slot] = rec
        self.ws.conv[:, slot] = conv
        if pending is not None:
            self.ws.mtp_pending[slot] = pending
        self._lengths[slot] = length
        self._pool.share(("ckpt", checkpoint), slot)

    def free_checkpoint(self, checkpoint: int) -> None:
        self._checkpoints.pop(checkpoint, None)
        self._pool.release(("ckpt", checkpoint))

    def memory_info(self) -> MemoryInfo:
        import cupy as cp

        free, total = cp.cuda.runtime.memGetInfo()
        return MemoryInfo(used_bytes=int(total - free), total_bytes=int(total))

    def close(self) -> None:
        self._checkpoints.clear()
        self.fwd._graphs.clear()

    # -- the step ------------------------------------------------------------------------------

    def _check(self, plan: StepPlan) -> None:
        check_plan(plan, self.n_slots, self._lengths, self.max_rows)
        for s in plan.slots:
            if s.end_pos > self.n_ctx:
                raise BackendError(
                    f"slot {s.slot}: {s.end_pos} tokens exceed the context {self.n_ctx}"
                )
        needed = sum(self._pool.pages_needed(s.slot, s.end_pos) for s in plan.slots)
        if needed > self._pool.free_pages:
            raise PoolExhausted(needed * self._pool.page_size, self._pool.free_tokens)

    def step(self, plan: StepPlan, while_running: Callable[[], None] | None = None) -> StepResult:
        started = time.perf_counter()
        self._check(plan)
        results = {s.slot: SlotResult(s.slot, [], n_rows=s.n_rows) for s in plan.slots}
        for group in self._passes(plan):
            self._run_pass(group, results, while_running)
            while_running = None  # once: after the first pass is queued
        return StepResult([results[s.slot] for s in plan.slots], time.perf_counter() - started)

    # -- launch-ahead (engine/backend.py `launches_ahead`) ---------------------------------------

    @property
    def launches_ahead(self) -> bool:
        # the MTP head catches up on each pass's accepted tokens from the host: with it, every
        # step waits for the one before
        return self._mtp is None

    def launch(self, plan: StepPlan, follow: Launched | None = None) -> Launched:
        """Queue a one-pass step without reading it back; `collect` finishes it. With
        `follow` (launched, not collected), the rows take the tokens it drew, on the device.
        A step that others follow is one-row decode groups only, so reading it back queues
        no device work (no replay, no checkpoint): nothing lands behind its follower."""
        import cupy as cp

        started = time.perf_counter()
        if not self.launches_ahead:
            raise BackendError("launch-ahead needs the backend without its MTP head")
        self._check(plan)
        previous: _InFlight | None = None
        if follow is not None:
            check_follow(plan, follow.plan)
            previous = follow.state
            assert isinstance(previous, _InFlight)
        passes = self._passes(plan)
        if len(passes) != 1 or any(s.return_logits for s in plan.slots):
            raise BackendError("only a step of one pass without debug logits can be launched")
        group = passes[0]
        queued = self._queue_pass(group, previous.queued if previous else None)
        # the drawn tokens to a pinned buffer (two, in turn: at most two steps are in flight)
        self._turn ^= 1
        drawn = self.ws.drawn_host[self._turn]
        stream = cp.cuda.get_current_stream()
        if queued.n_sample:
            cp.cuda.runtime.memcpyAsync(
                drawn.ctypes.data, self.ws.out_tok.data.ptr, 4 * queued.n_sample, 2, stream.ptr
            )
        copied = cp.cuda.Event(disable_timing=True)
        copied.record(stream)
        return Launched(plan, _InFlight(started, group, queued, drawn, copied))

    def collect(self, launched: Launched) -> StepResult:
        """Wait for a launched step's tokens and finish it as `step` does."""
        flight = launched.state
        assert isinstance(flight, _InFlight)
        flight.copied.synchronize()
        q = flight.queued
        drawn = flight.drawn[: q.n_sample].tolist()
        results = {s.slot: SlotResult(s.slot, [], n_rows=s.n_rows) for s in launched.plan.slots}
        self._finish(flight.group, q.seg, q.sample_rows, drawn, None, results)
        slots = [results[s.slot] for s in launched.plan.slots]
        return StepResult(slots, time.perf_counter() - flight.started)

    def _passes(self, plan: StepPlan) -> list[list[tuple[SlotStep, int, int]]]:
        """Split a plan into passes of (slot step, first row, end row): prefill chunks with
        checkpoints stop at each checkpoint, and the k-th pieces of all such chunks share the
        k-th pass (the first one beside the rows without cuts, unless those carry drafts), so
        four prompts starting together take two passes, not eight; drafts ride in a pass short
        enough to be replayed."""
        plain: list[tuple[SlotStep, int, int]] = []
        staged: list[list[tuple[SlotStep, int, int]]] = []  # each cut chunk's pieces, in order
        for s in plan.slots:
            cuts = sorted(c - s.start_pos for c in s.checkpoints if c < s.end_pos)
            if cuts:
                bounds = [0, *cuts, s.n_rows]
                staged.append([(s, a, b) for a, b in itertools.pairwise(bounds)])
            else:
                plain.append((s, 0, s.n_rows))
        depth = max((len(pieces) for pieces in staged), default=0)
        layers = [[pieces[k] for pieces in staged if k < len(pieces)] for k in range(depth)]
        drafts = [p for p in plain if p[0].kind is RowKind.DECODE and p[0].n_rows > 1]
        if drafts:  # their pass is replayed after verification: no prompt pieces join it
            rows = sum(b - a for _, a, b in plain)
            if rows > self.ws.t_save:
                rest = [p for p in plain if p not in drafts]
                return [*([rest] if rest else []), drafts, *layers]
            return [plain, *layers]
        first = plain + (layers[0] if layers else [])
        return [*([first] if first else []), *layers[1:]]

    def _run_pass(
        self,
        group: list[tuple[SlotStep, int, int]],
        results: dict[int, SlotResult],
        queued: Callable[[], None] | None = None,
    ) -> None:
        """One pass; `queued()` (if given) once its GPU work is queued, before the readback (or
        before the pass's graph is captured, which waits for the device: Forward.run)."""
        q = self._queue_pass(group, queued=queued)
        drawn = self.ws.out_tok[: q.n_sample].get().tolist() if q.n_sample else []
        self._finish(group, q.seg, q.sample_rows, drawn, q.logits, results)

    def _queue_pass(self, group: list[tuple[SlotStep, int, int]], follow: _Queued | None = None, queued: Callable[[], None] | None = None) -> _Queued:  # fmt: skip
        """Upload a pass's metadata and queue its work. follow: the pass before it, not read
        back, whose drawn tokens are this one's (one row per slot; check_follow). queued: called
        once the work is queued (Forward.run: before a graph capture)."""
        ws = self.ws
        T = sum(b - a for _, a, b in group)
        saved = ws.t_save >= T
        tok: list[int] = []
        pos: list[int] = []
        rslot: list[int] = []
        first: list[int] = []
        seg = np.zeros((5, len(group)), np.int32)
        sample_rows: list[tuple[SlotStep, int, int]] = []  # (step, row in step, row in pass)
        for i, (s, a, b) in enumerate(group):
            start = len(tok)
            self._extend(s.slot, s.start_pos + b)
            tok += s.tokens[a:b]
            pos += range(s.start_pos + a, s.start_pos + b)
            rslot += [s.slot] * (b - a)
            first += [start] * (b - a)
            commit = int(s.kind is RowKind.PREFILL or s.n_rows == 1 or not saved)
            seg[:, i] = (s.slot, start, b - a, commit, (b - a) * commit)
            final = b == s.n_rows and s.sample
            rows = (
                range(a, b)
                if s.return_logits or s.kind is RowKind.DECODE
                else ([b - 1] if final else [])
            )
            sample_rows += [(s, r, start + r - a) for r in rows]
        if len(sample_rows) > ws.max_sample:
            raise BackendError(
                f"{len(sample_rows)} rows to sample, the backend takes {ws.max_sample}"
            )
        # a one-row decode group has nothing to reject, so its length is known now: a step
        # launched to follow this one starts there; groups with drafts wait for `_finish`
        for s, _, _ in group:
            if s.kind is RowKind.DECODE and s.n_rows == 1:
                self._lengths[s.slot] = s.end_pos
        row_from: list[int] = []
        if follow is not None:  # the row of each slot takes what `follow` drew for it
            drawn_at = {s.slot: j for j, (s, _, _) in enumerate(follow.sample_rows)}
            row_from = [drawn_at[slot] for slot in rslot]
        self._upload(tok, pos, rslot, first, seg, sample_rows, row_from)
        if row_from:
            ws.row_tok[:T] = ws.out_tok[ws.row_from[:T]]
        below = self.fwd.ops.dims.att_core_below
        lay = Layout.of_rows(T, len(group), len(sample_rows), saved, min(pos), max(pos), below)
        logits = None
        if any(s.return_logits for s, _, _ in group):  # debug: no graph, logits read back
            self.fwd.trunk(lay)
            self.fwd.head(lay.n_rows, lay.n_sample)
            logits = ws.logits[: lay.n_sample].get()
            self.fwd.draw(lay.n_sample)
            if queued is not None:
                queued()
        else:
            self.fwd.run(lay, self.use_graphs, queued)
        return _Queued(seg, sample_rows, logits)

    def _upload(self, tok: list[int], pos: list[int], rslot: list[int], first: list[int], seg: np.ndarray, sample_rows: list[tuple[SlotStep, int, int]], row_from: list[int]) -> None:  # fmt: skip
        """The pass's metadata into the pinned host buffer, then one copy to the device; the
        page table only where a slot's pages changed."""
        ws, h = self.ws, self.ws.host_meta()
        T = len(tok)
        h.row_tok[:T], h.row_pos[:T], h.row_slot[:T], h.row_first[:T] = tok, pos, rslot, first
        if row_from:
            h.row_from[:T] = row_from
        h.seg[:] = 0
        h.seg[:, : seg.shape[1]] = seg
        M = len(sample_rows)
        if M:
            contexts: list[list[int]] = []
            windows: list[int] = []
            for s, r, _row in sample_rows:
                p = s.sampling
                contexts.append([*s.penalty_context, *s.tokens[: r + 1]] if p.has_penalties else [])
                windows.append(min(p.penalty_last_n, PENALTY_SLOTS))
            fp, ip = sampling_rows(
                [s.sampling for s, _, _ in sample_rows],
                [s.start_pos + r + 1 for s, r, _ in sample_rows],
            )
            h.sample_idx[:M] = [row for _, _, row in sample_rows]
            h.fparams[:M], h.iparams[:M] = fp, ip
            off, ptok, pcnt = penalty_lists(contexts, windows)
            h.pen_off[: M + 1] = off
            h.pen_tok[: ptok.size], h.pen_cnt[: pcnt.size] = ptok, pcnt
        ws.upload_meta()
        self._sync_page_table()

    def forget_page_table(self) -> None:
        """Something else wrote ws.page_table (a benchmark): copy every page list next step."""
        self._table[:] = -1
        self._table_revision = [-1] * self.n_slots

    def _sync_page_table(self) -> None:
        """Copy to the device the page lists that differ from the copy uploaded before (a
        decoding slot gains a page every page_size tokens; most steps copy nothing). Only the
        slots whose list changed since (the pool's revision) are even compared: converting the
        lists of idle slots holding long contexts cost ~0.05 ms each per step (v16)."""
        for slot in range(self.n_slots):
            revision = self._pool.revision(slot)
            if revision == self._table_revision[slot]:
                continue
            self._table_revision[slot] = revision
            pages = np.asarray(self._pool.pages(slot), np.int32)
            n = pages.size
            if n and not np.array_equal(self._table[slot, :n], pages):
                self._table[slot, :n] = pages
                self.ws.page_table[slot, :n].set(pages)

    def _finish(self, group: list[tuple[SlotStep, int, int]], seg: np.ndarray, sample_rows: list[tuple[SlotStep, int, int]], drawn: list[int], logits: np.ndarray | None, results: dict[int, SlotResult]) -> None:  # fmt: skip
        by_slot: dict[int, dict[int, int]] = {}
        rows_of: dict[int, list[int]] = {}
        for j, (s, r, _) in enumerate(sample_rows):
            by_slot.setdefault(s.slot, {})[r] = drawn[j]
            rows_of.setdefault(s.slot, []).append(j)
        replay: list[tuple[int, SlotStep, int]] = []
        spans: list[Span] = []  # the accepted rows, for the MTP head
        wants: list[Want] = []  # the drafts asked for
        saves: list[tuple[SlotResult, int, int]] = []  # checkpoints: (result, slot, length)
        for i, (s, a, b) in enumerate(group):
            res = results[s.slot]
            row = int(seg[1, i])
            if logits is not None and s.return_logits:
                chunk = logits[rows_of[s.slot]]
                res.logits = chunk if res.logits is None else np.concatenate([res.logits, chunk])
            if s.kind is RowKind.PREFILL:
                self._lengths[s.slot] = s.start_pos + b
                spans.append(Span(s.slot, row, s.start_pos + a, tuple(s.tokens[a:b])))
                if b == s.n_rows and s.sample:
                    res.accepted = [by_slot[s.slot][b - 1]]
                    wants.append(Want(s.slot, res.accepted[0], s.start_pos + b, s.n_draft))
                if s.start_pos + b in s.checkpoints:
                    saves.append((res, s.slot, s.start_pos + b))
                continue
            drawn_rows = by_slot[s.slot]
            kept = 0
            while kept < len(s.drafts) and (s.force_accept or drawn_rows[kept] == s.drafts[kept]):
                kept += 1
            res.accepted = [*s.drafts[:kept], drawn_rows[kept]]
            res.n_draft_accepted = kept
            if s.n_rows > 1:  # one row: its length was set when it was queued
                self._lengths[s.slot] = s.start_pos + kept + 1
            spans.append(Span(s.slot, row, s.start_pos, tuple(s.tokens[: kept + 1])))
            wants.append(Want(s.slot, res.accepted[-1], s.start_pos + kept + 1, s.n_draft))
            if s.n_rows > 1:
                replay.append((row, s, kept + 1))
        if replay:
            self._replay(replay)
        if self._mtp:
            self._mtp.catch_up(spans)  # before checkpoints: they keep the pending hidden
        for res, slot, length in saves:
            res.checkpoints.append((length, self.save_checkpoint(slot)))
        if self._mtp:
            lengths = {slot: self._lengths[slot] for slot in results}
            for slot, drafts in self._mtp.drafts(wants, lengths, self.n_ctx).items():
                results[slot].drafts = drafts

    def _extend(self, slot: int, length: int) -> None:
        """The slot's pages cover `length` positions (copy-on-write pages copied on the device;
        the page table is copied with the pass's metadata)."""
        for copy in self._pool.extend(slot, length):
            self.ws.copy_page(copy.src, copy.dst, copy.n_tokens, self._pool.page_size)

    def _borrow(self, slot: int, length: int) -> None:
        """_extend, and the page table on the device at once (MTP drafts, between passes)."""
        self._extend(slot, length)
        self._sync_page_table()

    def _replay(self, replay: list[tuple[int, SlotStep, int]]) -> None:
        """Commit the accepted rows of decode groups that ran with drafts (their state was left
        untouched by the pass): (first row in the pass, step, rows kept) per group."""
        seg = np.zeros((5, len(replay)), np.int32)
        for i, (start, s, rows) in enumerate(replay):
            seg[:, i] = (s.slot, start, rows, 1, rows)
            self._pool.truncate(s.slot, s.start_pos + rows)
        full = np.zeros(self.ws.rseg.shape, np.int32)
        full[:, : len(replay)] = seg
        self.ws.rseg.set(full)
        self.fwd.replay(len(replay))
