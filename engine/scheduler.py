"""Requests → slots → backend steps: continuous batching with chunked prefill, speculation and
prefix reuse.

One engine thread calls `step_once` in a loop. Each step carries every decoding slot's group
(pending token + drafts) and then the next chunk of every pending prompt, sharing what is left
of the row budget equally (round-robin for the remainder), so a long prompt never stalls the
decoders. A new request takes the idle slot — or the saved checkpoint — holding the longest
prefix of its prompt and processes only the rest; prefill saves checkpoints where
`engine.state.checkpoint_lengths` says. When the KV pool runs short, idle slots' caches and
checkpoints are evicted least-recently-used first; only then does a request fail, with a message.

Thread model: `submit` and `cancel` (any thread) post commands; the engine thread applies them
between steps, so slot state is touched by one thread only. `snapshot()` returns the statistics
published after the last step.
"""

from __future__ import annotations

import queue
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace

from engine.backend import (
    Backend,
    BackendError,
    Launched,
    RowKind,
    SlotStep,
    StepPlan,
    StepResult,
    with_drawn_tokens,
)
from engine.drafting import DraftPolicy, DraftProvider
from engine.prefix_cache import PrefixCache
from engine.scheduler_events import (
    EngineSnapshot,
    EventSink,
    Finished,
    GenerationRequest,
    Queued,
    Started,
    TokensOut,
    Usage,
)
from engine.scheduler_plan import Job, SlotRecord, rate_of, share_rows, usage_of
from engine.scheduler_stats import StatsBook

PUBLISH_INTERVAL_S = 0.05


@dataclass(frozen=True)
class SchedulerConfig:
    max_rows: int = 512  # rows per step (capped by the backend's)
    max_chunk: int = 256  # largest prefill chunk of one slot per step
    # prompt rows per step while any slot decodes, so decoding agents keep more than half their
    # solo rate while a long prompt is processed. Deeper into the prompt each row attends to
    # more context and costs more: a row at position p counts 1 + p / prefill_position_scale
    # (14,000 fits the H200's measured attention cost per row; 0 counts every row as 1).
    # Measured through the server on the H200 (bench/NOTES.md v15), an agent beside another's
    # 20K prompt keeps 58 % of its solo rate with 12 (the prompt at 392 tok/s), 50 % with 16
    # (435 tok/s); a position scale of 8,000 with 16 keeps 56 % at the same 393 tok/s.
    prefill_beside_decode: int = 12
    prefill_position_scale: int = 14000
    speculation: str = "mtp"  # off | mtp | lookup | mtp+lookup
    n_draft: int = 2
    checkpoint_interval: int = 2048
    checkpoint_min_gap: int = 64
    checkpoints: bool = True  # False: no prefix checkpoints at all (reuse of live slots only)
    max_checkpoints: int = 32
    force_accept: bool = False  # benchmark: accept every draft unverified
    # with a backend that `launches_ahead` (engine/backend.py): while every active slot decodes
    # one token per step (no drafts, no penalties, no prompt pending), queue the next step
    # before reading this one back, its input tokens taken on the device
    launch_ahead: bool = True


class Scheduler:
    """Drives one backend for many concurrent requests."""

    def __init__(
        self,
        backend: Backend,
        config: SchedulerConfig | None = None,
        boundary_tokens: frozenset[int] = frozenset(),
    ) -> None:
        self.backend = backend
        self.config = config or SchedulerConfig()
        self.policy = DraftPolicy(self.config.speculation, self.config.n_draft)
        self.boundary_tokens = boundary_tokens  # message starts, e.g. <|im_start|>
        self.slots = [SlotRecord(i) for i in range(backend.n_slots)]
        for slot in self.slots:  # start from a known state: the backend may have served before
            backend.reset_slot(slot.id)
        for owner in backend.pool.owners():  # checkpoints nobody indexes any more
            if isinstance(owner, tuple) and owner[0] == "ckpt":
                backend.free_checkpoint(owner[1])
        self.cache = PrefixCache(backend, self.config.max_checkpoints)
        self.stats = StatsBook()
        self._waiting: deque[Job] = deque()
        self._commands: queue.SimpleQueue[tuple[str, object]] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._running = False
        self._turn = 0  # round-robin offset for the prefill budget
        self._published_at = -PUBLISH_INTERVAL_S
        self._changed = True  # a slot changed hands since the last snapshot
        self._flush_hooks: list[Callable[[], None]] = []
        # a step launched and not yet collected (launch-ahead); slots admit nothing meanwhile
        self._inflight: Launched | None = None
        self._ahead = self.config.launch_ahead and getattr(backend, "launches_ahead", False)

    # -- API for other threads -------------------------------------------------------------------

    def submit(self, request: GenerationRequest, sink: EventSink) -> None:
        self._commands.put(("submit", Job(request, sink)))
        self._wake.set()

    def cancel(self, request_id: str) -> None:
        self._commands.put(("cancel", request_id))
        self._wake.set()

    def add_flush_hook(self, hook: Callable[[], None]) -> None:
        """`hook()` is called on the engine thread once a step's device work is queued (before
        the engine waits for it), when the engine goes idle, and after failures: a sink that
        only queues its events (engine/server_generation.py LoopMailbox) hands them over then,
        so their consumers run while the device works instead of between two steps."""
        self._flush_hooks.append(hook)

    def _flush(self) -> None:
        for hook in self._flush_hooks:
            hook()

    def snapshot(self) -> EngineSnapshot:
        return self.stats.latest

    def start(self) -> None:
        self._running = True
        self._thread = threading.Thread(target=self._run, name="openjet-engine", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._running = False
        self._wake.set()
        if self._thread:
            self._thread.join(timeout=30)
        self._flush()

    def _run(self) -> None:
        while self._running:
            try:
                busy = self.step_once()
            except Exception as error:  # a bug here must fail requests, not hang them
                traceback.print_exc()
                self._fail_everything(f"engine error: {type(error).__name__}: {error}")
                self._flush()
                busy = True
            if not busy:
                self._wake.wait(0.05)
                self._wake.clear()

    def _fail_everything(self, message: str) -> None:
        self._inflight = None  # whatever was launched is void with the slots it served
        for slot in self.slots:
            if slot.job is not None:
                self._fail_slot(slot.id, message)
        while self._waiting:
            job = self._waiting.popleft()
            job.sink(Finished("error", usage_of(job), message))

    # -- one iteration ---------------------------------------------------------------------------

    def step_once(self) -> bool:
        """Apply commands, admit, run one backend step; False when there was nothing to run."""
        self._apply_commands()
        if self._inflight is not None:
            return self._collect_inflight()
        self._admit_waiting()
        plan = self._plan_that_fits()
        if plan is None:
            self._flush()
            self._publish(force=True)  # idle: the last figures must not stay stale
            return False
        if self._ahead and self._can_follow(plan):
            try:  # collected by the next call, after the step that follows it is launched
                self._inflight = self.backend.launch(plan)  # type: ignore[attr-defined]
            except Exception as error:
                self._step_failed(plan, error)
                return True
            # the last plain step's tokens (often a prompt's first token) go out now, while this
            # one runs, not after the next launch as well (on the GPU that launch can be a
            # layout's graph capture, tens of ms: bench/NOTES.md v23)
            self._flush()
            return True
        try:
            if getattr(self.backend, "overlaps_host_work", False):
                result = self.backend.step(plan, while_running=self._flush)  # type: ignore[call-arg]
            else:
                self._flush()
                result = self.backend.step(plan)
        except Exception as error:  # a failed step must not take the engine thread down
            self._step_failed(plan, error)
            return True
        self._apply(plan, result)
        self._publish()
        return True

    def _step_failed(self, plan: StepPlan, error: Exception) -> None:
        for step in plan.slots:
            self._fail_slot(step.slot, f"engine step failed: {type(error).__name__}: {error}")
        self._flush()
        self._publish(force=True)

    # -- launching ahead (SchedulerConfig.launch_ahead) -----------------------------------------

    def _collect_inflight(self) -> bool:
        """Launch the step after the one in flight if it can follow it, then collect and apply
        the one in flight (its tokens reach the clients while the next step runs)."""
        launched = self._inflight
        assert launched is not None
        self._inflight = None
        following = self._following(launched.plan)
        nxt: Launched | None = None
        if following is not None:
            try:
                nxt = self.backend.launch(following, launched)  # type: ignore[attr-defined]
            except BackendError:  # refused before anything was queued: read this one back alone
                nxt = None
        try:
            self._flush()
            result: StepResult = self.backend.collect(launched)  # type: ignore[attr-defined]
        except Exception as error:  # both steps' slots (the second's are among the first's)
            self._step_failed(launched.plan, error)
            return True
        self._apply(launched.plan, result)
        if nxt is not None:  # the rows' real tokens, for the slots' records when it is applied
            nxt.plan = with_drawn_tokens(nxt.plan, result)
        self._inflight = nxt
        self._publish()
        return True

    def _can_follow(self, plan: StepPlan) -> bool:
        """Whether another step may follow `plan` before it is read back: nobody waits for a
        slot, and every slot with a request runs one row of decoding in it, no drafts."""
        steps = {s.slot: s for s in plan.slots}
        for slot in self.slots:
            if slot.job is None:
                continue
            step = steps.get(slot.id)
            if step is None or step.kind is not RowKind.DECODE or step.n_rows != 1:
                return False
            if (
                step.n_draft
                or self._wants_drafts(slot.job)
                or slot.job.request.sampling.has_penalties
            ):
                return False
        return bool(steps) and not self._waiting

    def _wants_drafts(self, job: Job) -> bool:
        """Whether the slot's next groups may carry drafts (then each step waits for the last)."""
        wanted = self._n_draft(job)
        if wanted <= 0:  # as in _apply: the provider is not even asked
            return False
        provider = job.request.draft_provider or self.policy
        proposes = getattr(provider, "proposes", None)  # a provider without it may draft
        return proposes is None or proposes(wanted, bool(getattr(self.backend, "has_mtp", False)))

    def _following(self, plan: StepPlan) -> StepPlan | None:
        """The step after `plan` (in flight, not read back), to launch now: one more row for
        each slot whose request will still want a token after `plan` (a request that ends on
        its length there gets none), if nothing arrived meanwhile and the pages fit without
        evicting. Its tokens are placeholders (the rows take what `plan` draws)."""
        if not self._commands.empty() or not self._can_follow(plan):
            return None
        steps = []
        for step in plan.slots:
            job = self.slots[step.slot].job
            if job is None:  # it ended while `plan` ran: `plan`'s row for it is its last
                continue
            if (
                len(job.generated) + 2 > job.request.max_tokens
                or step.end_pos + 2 > self.backend.n_ctx
            ):
                continue
            steps.append(replace(step, tokens=(0,), start_pos=step.end_pos, penalty_context=()))
        if not steps:
            return None
        following = StepPlan(tuple(steps))
        pool = self.backend.pool
        needed = sum(pool.pages_needed(s.slot, s.end_pos) for s in following.slots)
        return following if needed <= pool.free_pages else None

    def _apply_commands(self) -> None:
        while True:
            try:
                kind, payload = self._commands.get_nowait()
            except queue.Empty:
                return
            if kind == "submit":
                assert isinstance(payload, Job)
                self._accept(payload)
            elif kind == "cancel":
                self._cancel(str(payload))

    def _accept(self, job: Job) -> None:
        prompt = job.request.prompt
        if not prompt:
            job.sink(Finished("error", Usage(), "the prompt is empty"))
        elif len(prompt) + 1 > self.backend.n_ctx:
            message = f"the prompt has {len(prompt)} tokens; the context holds {self.backend.n_ctx}"
            job.sink(Finished("error", Usage(len(prompt)), message))
        else:
            self._waiting.append(job)
            self._changed = True

    def _cancel(self, request_id: str) -> None:
        for job in list(self._waiting):
            if job.request.id == request_id:
                self._waiting.remove(job)
                self._changed = True
                job.sink(Finished("cancelled", usage_of(job)))
        for slot in self.slots:
            if slot.job and slot.job.request.id == request_id:
                self._finish(slot, "cancelled")

    # -- admission and prefix reuse --------------------------------------------------------------

    def _admit_waiting(self) -> None:
        while self._waiting and any(s.job is None for s in self.slots):
            self._admit(self._waiting.popleft())
        for position, job in enumerate(self._waiting, start=1):
            if job.queue_position != position:  # tell a waiting client where it stands
                job.queue_position = position
                job.sink(Queued(position))

    def _admit(self, job: Job) -> None:
        prompt = job.request.prompt
        now = time.monotonic()
        slot = self.cache.place(prompt, [s for s in self.slots if s.job is None], now)
        self._changed = True
        start = len(slot.tokens)
        slot.job = job
        job.slot, job.phase, job.prompt_pos, job.cached = slot.id, "prefill", start, start
        job.admitted_at = now
        config = self.config
        job.cuts = (
            self.cache.cuts(
                prompt,
                start,
                config.checkpoint_interval,
                self.boundary_tokens,
                config.checkpoint_min_gap,
            )
            if config.checkpoints
            else []
        )
        self.stats.count("prompt_tokens", len(prompt))
        self.stats.count("cached_tokens", start)
        job.sink(Started(slot.id, start))

    # -- planning --------------------------------------------------------------------------------

    def _plan(self) -> StepPlan | None:
        """Every decoding slot's group (one row each at least, drafts from what is left), then
        prefill chunks from the rest of the row budget (at most _rows_beside_decode() rows when
        a slot decodes)."""
        budget = min(self.config.max_rows, self.backend.max_rows)
        decoding = [s for s in self.slots if s.job is not None and s.job.phase == "decode"]
        budget -= len(decoding)
        drafts = share_rows([self._useful_drafts(s) for s in decoding], max(budget, 0))
        steps: list[SlotStep] = []
        for slot, n_drafts in zip(decoding, drafts, strict=True):
            assert slot.job is not None
            group = tuple(slot.job.group[: n_drafts + 1])
            steps.append(self._slot_step(slot, slot.job, RowKind.DECODE, group, True, ()))
            budget -= n_drafts
        if decoding:
            decode_rows = len(decoding) + sum(drafts)
            budget = min(budget, self._quantum_fit(decode_rows, self._rows_beside_decode()))
        steps.extend(self._prefill_steps(budget))
        return StepPlan(tuple(steps)) if steps else None

    def _rows_beside_decode(self) -> int:
        """Prompt rows a step may carry beside decoding slots: prefill_beside_decode row costs,
        a row costing more the deeper the deepest pending prompt is (never less than one row,
        so a prompt always advances)."""
        cfg = self.config
        deepest = max(
            (len(s.tokens) for s in self.slots if s.job is not None and s.job.phase == "prefill"),
            default=0,
        )
        cost = 1.0 + deepest / cfg.prefill_position_scale if cfg.prefill_position_scale > 0 else 1.0
        return max(1, int(cfg.prefill_beside_decode / cost))

    def _quantum_fit(self, decode_rows: int, prompt_rows: int) -> int:
        """Prompt rows beside decode_rows, trimmed so the step does not spill a few rows past a
        multiple of the backend's row quantum (`row_quantum`: the CUDA row kernels take rows in
        n-tiles of 8, and a step of 17 rows costs about as much as one of 24). Trims at most
        half a quantum and never to zero prompt rows."""
        quantum = int(getattr(self.backend, "row_quantum", 1))
        total = decode_rows + prompt_rows
        over = total % quantum if quantum > 1 and total > quantum else 0
        if 0 < over <= quantum // 2 and prompt_rows > over:
            return prompt_rows - over
        return prompt_rows

    def _useful_drafts(self, slot: SlotRecord) -> int:
        """Drafts worth verifying: no more than the tokens still wanted or the context allows."""
        job = slot.job
        assert job is not None
        remaining = job.request.max_tokens - len(job.generated)
        room = self.backend.n_ctx - len(slot.tokens) - 1
        return max(0, min(len(job.group) - 1, remaining - 1, room))

    def _prefill_steps(self, budget: int) -> list[SlotStep]:
        pending = [s for s in self.slots if s.job is not None and s.job.phase == "prefill"]
        if not pending or budget <= 0:
            return []
        self._turn = (self._turn + 1) % len(pending)  # who gets the remainder rotates
        pending = pending[self._turn :] + pending[: self._turn]
        wants = [min(self._prompt_left(s), self.config.max_chunk) for s in pending]
        sizes = share_rows(wants, budget)
        return [self._prefill_step(s, n) for s, n in zip(pending, sizes, strict=True) if n > 0]

    def _prompt_left(self, slot: SlotRecord) -> int:
        assert slot.job is not None
        return len(slot.job.request.prompt) - slot.job.prompt_pos

    def _prefill_step(self, slot: SlotRecord, size: int) -> SlotStep:
        job = slot.job
        assert job is not None
        begin, end = job.prompt_pos, job.prompt_pos + size
        chunk = tuple(job.request.prompt[begin:end])
        cuts = tuple(c for c in job.cuts if begin < c <= end)
        final = end == len(job.request.prompt)
        return self._slot_step(slot, job, RowKind.PREFILL, chunk, final, cuts)

    def _slot_step(
        self,
        slot: SlotRecord,
        job: Job,
        kind: RowKind,
        tokens: tuple[int, ...],
        sample: bool,
        cuts: tuple[int, ...],
    ) -> SlotStep:
        sampling = job.request.sampling
        context = tuple(slot.tokens[-sampling.penalty_last_n :]) if sampling.has_penalties else ()
        wants_mtp = sample and job.request.draft_provider is None and self.policy.uses_mtp
        return SlotStep(
            slot=slot.id,
            kind=kind,
            tokens=tokens,
            start_pos=len(slot.tokens),
            sampling=sampling,
            sample=sample,
            n_draft=self._n_draft(job) if wants_mtp else 0,
            penalty_context=context,
            checkpoints=cuts,
            force_accept=self.config.force_accept,
        )

    def _n_draft(self, job: Job) -> int:
        wanted = self.config.n_draft if job.request.n_draft is None else job.request.n_draft
        return max(0, min(wanted, 4))

    def _plan_that_fits(self) -> StepPlan | None:
        """The step plan, after evicting idle caches (or failing requests) until it fits."""
        while True:
            plan = self._plan()
            if plan is None:
                return None
            pool = self.backend.pool
            needed = sum(pool.pages_needed(s.slot, s.end_pos) for s in plan.slots)
            if needed <= pool.free_pages or self._evict(needed - pool.free_pages):
                return plan
            victim = max(plan.slots, key=lambda s: self._admitted_at(s.slot))
            free = pool.free_tokens
            self._fail_slot(
                victim.slot,
                f"KV pool exhausted: {needed * pool.page_size} tokens needed this step, {free} free "
                f"of {pool.total_tokens} after evicting every idle cache",
            )

    def _admitted_at(self, slot_id: int) -> float:
        job = self.slots[slot_id].job
        return job.admitted_at if job else 0.0

    # -- results ---------------------------------------------------------------------------------

    def _apply(self, plan: StepPlan, result: StepResult) -> None:
        now = time.monotonic()
        self.stats.count("steps", 1)
        self.stats.count("rows", plan.n_rows)
        for step in plan.slots:
            slot = self.slots[step.slot]
            job = slot.job
            if job is None:  # ended (stop, length, cancel) while this launched-ahead step ran:
                slot.tokens.extend(step.tokens)  # the slot holds its row; what it drew is void
                continue
            out = result.for_slot(step.slot)
            slot.last_used = now
            if step.kind is RowKind.PREFILL:
                self._apply_prefill(slot, job, step, out.checkpoints, now)
            else:
                kept = out.n_draft_accepted
                slot.tokens.extend(step.tokens[: kept + 1])
                job.proposed += len(step.drafts)
                job.accepted += kept
                self.stats.count("drafts_proposed", len(step.drafts))
                self.stats.count("drafts_accepted", kept)
            if step.sample:
                self._emit(slot, job, out.accepted, out.drafts, now)

    def _apply_prefill(
        self, slot: SlotRecord, job: Job, step: SlotStep, saved: list[tuple[int, int]], now: float
    ) -> None:
        slot.tokens.extend(step.tokens)
        job.prompt_pos = step.end_pos
        self.cache.remember(saved, job.request.prompt, now)
        if step.sample:
            job.phase = "decode"
            job.first_token_at = now

    def _emit(
        self, slot: SlotRecord, job: Job, tokens: list[int], mtp: list[int], now: float
    ) -> None:
        out: list[int] = []
        reason = None
        for token in tokens:
            if token in job.request.stop_ids:
                reason = "stop"
                break
            out.append(token)
            job.generated.append(token)
            if len(job.generated) >= job.request.max_tokens:
                reason = "length"
                break
        if reason is None and len(slot.tokens) + 1 >= self.backend.n_ctx:
            reason = "length"
        if out:
            self.stats.tokens_out(len(out), now)
            job.sink(TokensOut(tuple(out)))
        if reason is not None:
            self._finish(slot, reason)
            return
        pending = tokens[-1]
        provider: DraftProvider = job.request.draft_provider or self.policy
        room = job.request.max_tokens - len(job.generated) - 1
        wanted = min(self._n_draft(job), room)
        if wanted <= 0:  # no drafts asked (n_draft 0, or the last token): no provider call
            job.group = [pending]
            return
        # copying a long context every step is costly: only for providers that read it
        context = [*slot.tokens, pending] if getattr(provider, "needs_context", True) else [pending]
        job.group = [pending, *provider(context, mtp, wanted)]

    def _finish(self, slot: SlotRecord, reason: str, error: str | None = None) -> None:
        job = slot.job
        if job is None:
            return
        slot.job = None
        self._changed = True
        slot.last_used = time.monotonic()
        self.stats.slot_done(slot.id, rate_of(job), job)
        self.stats.count("requests", 1)
        job.sink(Finished(reason, usage_of(job), error))

    def _fail_slot(self, slot_id: int, message: str) -> None:
        """End the slot's request with an error and drop its state (it may be half-written)."""
        slot = self.slots[slot_id]
        self._finish(slot, "error", message)
        self.backend.reset_slot(slot_id)
        slot.tokens = []

    def _evict(self, pages: int) -> bool:
        before = self.cache.evictions
        freed = self.cache.evict_idle(pages, self.slots)
        self.stats.count("evictions", self.cache.evictions - before)
        return freed

    def _publish(self, force: bool = False) -> None:
        """Refresh the snapshot (/v1/slots, /metrics, `openjet top`): at most every
        PUBLISH_INTERVAL_S while steps run (building it costs ~50 us, a step ~10 ms), at once
        when a request starts or ends or the engine goes idle."""
        now = time.monotonic()
        if force or self._changed or now - self._published_at >= PUBLISH_INTERVAL_S:
            self.stats.publish(self, len(self._waiting))
            self._published_at, self._changed = now, False
