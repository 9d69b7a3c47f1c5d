"""The scheduler against a small deterministic backend that honours the backend contract.

`FakeBackend`'s "model" is a rolling hash of the whole sequence: the logits of a row are random
numbers seeded by the hash of every token before it, so any state mix-up between slots, a wrong
rollback or a mis-restored checkpoint changes the tokens. Its MTP drafts are the true greedy
continuation with every third draft wrong, so verification both keeps and rejects.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pytest

from engine.backend import (
    GREEDY,
    MemoryInfo,
    RowKind,
    SamplingParams,
    SlotResult,
    SlotStep,
    StepPlan,
    StepResult,
    check_plan,
)
from engine.drafting import ScriptedDrafts
from engine.sampling import sample, verify
from engine.scheduler import Scheduler, SchedulerConfig
from engine.scheduler_events import (
    Finished,
    GenerationRequest,
    Queued,
    RequestEvent,
    Started,
    TokensOut,
)
from engine.scheduler_plan import share_rows
from engine.state import PagedKVPool, PoolExhausted

VOCAB = 97


def _mix(h: int, token: int) -> int:
    return (h * 1_000_003 + token + 1) % (1 << 61)


def _logits(h: int) -> np.ndarray:
    return np.random.default_rng(h).normal(size=VOCAB).astype(np.float32)


@dataclass
class _Seq:
    tokens: list[int] = field(default_factory=list)
    h: int = 7


class FakeBackend:
    kind = "reference"
    model_name = "fake"
    row_quantum = 1
    tokenizer = None
    chat_template = None

    def __init__(self, n_slots: int = 4, kv_tokens: int = 4096, n_ctx: int = 4096) -> None:
        self.n_slots, self.n_vocab, self.max_rows = n_slots, VOCAB, 512
        self.n_ctx = n_ctx
        self._pool = PagedKVPool(kv_tokens, 16)
        self.seqs = [_Seq() for _ in range(n_slots)]
        self.checkpoints: dict[int, _Seq] = {}
        self.plans: list[StepPlan] = []
        self.rows_processed = 0

    @property
    def pool(self) -> PagedKVPool:
        return self._pool

    def slot_length(self, slot: int) -> int:
        return len(self.seqs[slot].tokens)

    def reset_slot(self, slot: int) -> None:
        self.seqs[slot] = _Seq()
        self._pool.release(slot)

    def save_checkpoint(self, slot: int) -> int:
        key = len(self.checkpoints) + 1000
        seq = self.seqs[slot]
        self.checkpoints[key] = _Seq(list(seq.tokens), seq.h)
        self._pool.share(slot, ("ckpt", key))
        return key

    def restore_checkpoint(self, slot: int, checkpoint: int) -> None:
        saved = self.checkpoints[checkpoint]
        self.seqs[slot] = _Seq(list(saved.tokens), saved.h)
        self._pool.share(("ckpt", checkpoint), slot)

    def free_checkpoint(self, checkpoint: int) -> None:
        self.checkpoints.pop(checkpoint, None)
        self._pool.release(("ckpt", checkpoint))

    def memory_info(self) -> MemoryInfo:
        return MemoryInfo()

    def close(self) -> None:
        pass

    def _run(self, slot: int, tokens: tuple[int, ...]) -> np.ndarray:
        seq = self.seqs[slot]
        self._pool.extend(slot, len(seq.tokens) + len(tokens))
        rows = []
        for token in tokens:
            seq.h = _mix(seq.h, token)
            seq.tokens.append(token)
            rows.append(_logits(seq.h))
        self.rows_processed += len(tokens)
        return np.stack(rows)

    def _drafts(self, slot: int, token: int, n: int) -> list[int]:
        h, drafts = _mix(self.seqs[slot].h, token), []
        for i in range(n):
            best = int(np.argmax(_logits(h)))
            drafts.append(best if (h + i) % 3 else (best + 1) % VOCAB)
            h = _mix(h, drafts[-1])
        return drafts

    def step(self, plan: StepPlan) -> StepResult:
        check_plan(plan, self.n_slots, [len(s.tokens) for s in self.seqs], self.max_rows)
        needed = sum(self._pool.pages_needed(s.slot, s.end_pos) for s in plan.slots)
        if needed > self._pool.free_pages:
            raise PoolExhausted(needed * 16, self._pool.free_tokens)
        self.plans.append(plan)
        return StepResult([self._one(s) for s in plan.slots])

    def _one(self, step: SlotStep) -> SlotResult:
        saved = _Seq(list(self.seqs[step.slot].tokens), self.seqs[step.slot].h)
        result = SlotResult(step.slot, [], n_rows=step.n_rows)
        if step.kind is RowKind.PREFILL:
            begin = 0
            for cut in [*(c - step.start_pos for c in step.checkpoints), step.n_rows]:
                if cut > begin:
                    logits = self._run(step.slot, step.tokens[begin:cut])
                begin = cut
                if cut + step.start_pos in step.checkpoints:
                    result.checkpoints.append(
                        (cut + step.start_pos, self.save_checkpoint(step.slot))
                    )
            if step.sample:
                ctx = [*step.penalty_context, *step.tokens]
                result.accepted = [sample(logits[-1], step.sampling, step.end_pos, ctx)]
        else:
            logits = self._run(step.slot, step.tokens)
            accepted, kept = verify(
                logits, step.tokens, step.start_pos, step.sampling, step.penalty_context
            )
            result.accepted, result.n_draft_accepted = accepted, kept
            self.seqs[step.slot] = saved
            self._pool.truncate(step.slot, step.start_pos)
            self._run(step.slot, step.tokens[: kept + 1])
        if step.sample:
            result.drafts = self._drafts(step.slot, result.accepted[-1], step.n_draft)
        return result


def solo_greedy(prompt: list[int], n: int) -> list[int]:
    """What the fake model generates, computed directly (no scheduler)."""
    h = 7
    for token in prompt:
        h = _mix(h, token)
    out = []
    for _ in range(n):
        out.append(int(np.argmax(_logits(h))))
        h = _mix(h, out[-1])
    return out


class Collector:
    def __init__(self) -> None:
        self.events: list[RequestEvent] = []

    def __call__(self, event: RequestEvent) -> None:
        self.events.append(event)

    @property
    def tokens(self) -> list[int]:
        return [t for e in self.events if isinstance(e, TokensOut) for t in e.tokens]

    @property
    def finished(self) -> Finished | None:
        done = [e for e in self.events if isinstance(e, Finished)]
        return done[0] if done else None


def run(
    scheduler: Scheduler, requests: list[GenerationRequest], limit: int = 2000
) -> list[Collector]:
    sinks = [Collector() for _ in requests]
    for request, sink in zip(requests, sinks, strict=True):
        scheduler.submit(request, sink)
    for _ in range(limit):
        scheduler.step_once()
        if all(s.finished for s in sinks):
            return sinks
    raise AssertionError("requests did not finish")


def prompt(seed: int, n: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(0, VOCAB, n)]


def test_concurrent_requests_get_their_solo_tokens() -> None:
    backend = FakeBackend()
    scheduler = Scheduler(backend, SchedulerConfig(max_rows=64, max_chunk=32))
    prompts = [prompt(i, 40 + 30 * i) for i in range(6)]  # more requests than slots: queueing
    sinks = run(scheduler, [GenerationRequest(p, GREEDY, max_tokens=12) for p in prompts])
    for p, sink in zip(prompts, sinks, strict=True):
        assert sink.tokens == solo_greedy(p, 12)
        assert sink.finished is not None and sink.finished.reason == "length"
    assert max(plan.n_rows for plan in backend.plans) <= 64
    # decoders never wait for a prefill: a step with a decode row also held prefill rows
    mixed = [
        p for p in backend.plans if {s.kind for s in p.slots} == {RowKind.DECODE, RowKind.PREFILL}
    ]
    assert mixed


def run_beside_a_decoder(
    config: SchedulerConfig,
    short: list[int],
    long: list[int],
    decoded: int,
    long_tokens: int,
    row_quantum: int = 1,
) -> list[StepPlan]:
    """A short prompt that then decodes `decoded` tokens and a long prompt beside it: both get
    their solo tokens. The run's step plans."""
    backend = FakeBackend()
    backend.row_quantum = row_quantum
    sinks = run(
        Scheduler(backend, config),
        [
            GenerationRequest(short, GREEDY, max_tokens=decoded),
            GenerationRequest(long, GREEDY, max_tokens=long_tokens),
        ],
    )
    assert [sink.tokens for sink in sinks] == [
        solo_greedy(short, decoded),
        solo_greedy(long, long_tokens),
    ]
    return backend.plans


def test_prefill_beside_a_decoding_slot_is_capped() -> None:
    """While a slot decodes, another's long prompt advances at most prefill_beside_decode rows
    per step; alone, it takes max_chunk rows; the tokens are the solo tokens either way."""
    config = SchedulerConfig(
        max_rows=256, max_chunk=128, prefill_beside_decode=8, prefill_position_scale=0
    )
    plans = run_beside_a_decoder(config, prompt(3, 10), prompt(4, 400), 200, 4)
    prefill_rows = [
        (sum(s.n_rows for s in p.slots if s.kind is RowKind.PREFILL),
         any(s.kind is RowKind.DECODE for s in p.slots))
        for p in plans
    ]  # fmt: skip
    beside = [rows for rows, decoding in prefill_rows if decoding and rows]
    alone = [rows for rows, decoding in prefill_rows if not decoding]
    assert beside and max(beside) <= 8
    assert max(alone) == 10 + 128  # the first step: both prompts, nobody decodes yet


def test_prompt_rows_beside_decoding_shrink_with_the_prompts_depth() -> None:
    """Deeper into a long prompt each row attends to more context: beside a decoding slot the
    chunk is prefill_beside_decode / (1 + position / prefill_position_scale) rows, at least one;
    the tokens stay the solo tokens."""
    config = SchedulerConfig(
        max_rows=256, max_chunk=128, prefill_beside_decode=12, prefill_position_scale=50
    )
    plans = run_beside_a_decoder(config, prompt(5, 10), prompt(6, 500), 300, 3)
    beside = [
        (step.start_pos, step.n_rows)
        for plan in plans
        if any(s.kind is RowKind.DECODE for s in plan.slots)
        for step in plan.slots
        if step.kind is RowKind.PREFILL
    ]
    assert beside
    for start, rows in beside:
        assert rows == min(500 - start, max(1, int(12 / (1 + start / 50))))
    assert {rows for _, rows in beside} >= {2, 1}  # shrinking as it goes deeper


def test_prompt_rows_beside_decoding_stop_at_the_backends_row_quantum() -> None:
    """A backend whose step cost grows in quanta of 8 rows (the CUDA row kernels' n-tiles):
    beside one decoding row, 16 prompt rows would make a 17-row step, as slow as 24, so the
    chunk is trimmed to 15; a step already on the quantum, or too small, is left alone."""
    config = SchedulerConfig(
        max_rows=256, max_chunk=128, prefill_beside_decode=16, prefill_position_scale=0,
        speculation="off",
    )  # fmt: skip
    for quantum, want in ((1, 16), (8, 15)):
        plans = run_beside_a_decoder(config, prompt(7, 10), prompt(8, 300), 100, 3, quantum)
        totals = {
            plan.n_rows
            for plan in plans
            if any(s.kind is RowKind.DECODE for s in plan.slots)
            and any(s.kind is RowKind.PREFILL for s in plan.slots)
        }
        assert max(totals) == 1 + want
    small = SchedulerConfig(
        max_rows=256,
        max_chunk=32,
        prefill_beside_decode=5,
        prefill_position_scale=0,
        speculation="off",
    )
    plans = run_beside_a_decoder(small, prompt(7, 10), prompt(8, 100), 60, 3, 8)
    mixed = [p.n_rows for p in plans if {s.kind for s in p.slots} == set(RowKind)]
    assert max(mixed) == 6  # 1 + 5: below a quantum, left alone


def test_speculation_off_mtp_and_scripted_give_identical_tokens() -> None:
    p = prompt(1, 50)
    expected = solo_greedy(p, 20)
    for mode in ("off", "mtp", "lookup", "mtp+lookup"):
        scheduler = Scheduler(FakeBackend(), SchedulerConfig(speculation=mode, n_draft=3))
        [sink] = run(scheduler, [GenerationRequest(p, GREEDY, max_tokens=20)])
        assert sink.tokens == expected, mode
    backend = FakeBackend()
    scheduler = Scheduler(backend, SchedulerConfig(n_draft=3))
    scripted = ScriptedDrafts([p + expected], n_draft=3)
    request = GenerationRequest(p, GREEDY, max_tokens=20, draft_provider=scripted)
    [sink] = run(scheduler, [request])
    assert sink.tokens == expected
    assert sink.finished is not None and sink.finished.usage.drafts_accepted == scripted.proposed
    decode_steps = [s for plan in backend.plans for s in plan.slots if s.kind is RowKind.DECODE]
    assert len(decode_steps) == 5  # 1 token from prefill, then 4 tokens per step: 1 + 5*4 >= 20


def test_mtp_counters_count_kept_and_rejected_drafts() -> None:
    scheduler = Scheduler(FakeBackend(), SchedulerConfig(speculation="mtp", n_draft=3))
    [sink] = run(scheduler, [GenerationRequest(prompt(2, 30), GREEDY, max_tokens=30)])
    usage = sink.finished.usage if sink.finished else None
    assert usage is not None and 0 < usage.drafts_accepted < usage.drafts_proposed
    stats = scheduler.snapshot().slots
    assert sum(s.drafts_accepted for s in stats) == usage.drafts_accepted


def test_prefix_reuse_processes_only_new_tokens() -> None:
    backend = FakeBackend()
    config = SchedulerConfig(checkpoint_interval=64, checkpoint_min_gap=8)
    scheduler = Scheduler(backend, config, boundary_tokens=frozenset({0}))
    system = prompt(3, 150)
    system[-1] = 0  # a message boundary ends the shared system prompt
    first = system + prompt(4, 20)
    [sink] = run(scheduler, [GenerationRequest(first, GREEDY, max_tokens=8)])
    follow = first + sink.tokens + prompt(5, 10)
    before = len(backend.plans)
    [again] = run(scheduler, [GenerationRequest(follow, GREEDY, max_tokens=8)])
    assert again.tokens == solo_greedy(follow, 8)
    started = next(e for e in again.events if isinstance(e, Started))
    assert started.cached_tokens == len(first) + 7  # the live slot: prompt + all but the last token
    prefill = [
        s for plan in backend.plans[before:] for s in plan.slots if s.kind is RowKind.PREFILL
    ]
    assert sum(s.n_rows for s in prefill) == len(follow) - started.cached_tokens
    # another "agent" with the same system prompt reuses the checkpoint at the boundary
    other = [*system[:-1], 0, *prompt(6, 30)]
    busy = GenerationRequest([*follow, 1, 2, 3], GREEDY, max_tokens=200)
    sinks = run(scheduler, [busy, GenerationRequest(other, GREEDY, max_tokens=6)], limit=5000)
    assert sinks[1].tokens == solo_greedy(other, 6)
    assert next(e for e in sinks[1].events if isinstance(e, Started)).cached_tokens >= 128


def test_edit_to_earlier_context_restarts_from_nearest_checkpoint() -> None:
    backend = FakeBackend()
    scheduler = Scheduler(backend, SchedulerConfig(checkpoint_interval=64))
    original = prompt(7, 300)
    run(scheduler, [GenerationRequest(original, GREEDY, max_tokens=4)])
    edited = list(original)
    edited[200] = (edited[200] + 1) % VOCAB
    [sink] = run(scheduler, [GenerationRequest(edited, GREEDY, max_tokens=4)])
    assert sink.tokens == solo_greedy(edited, 4)
    assert next(e for e in sink.events if isinstance(e, Started)).cached_tokens == 192


def test_pool_exhaustion_evicts_idle_then_fails_cleanly() -> None:
    backend = FakeBackend(n_slots=2, kv_tokens=320, n_ctx=320)
    scheduler = Scheduler(backend, SchedulerConfig(checkpoint_interval=64))
    a, b = prompt(8, 180), prompt(9, 180)
    run(scheduler, [GenerationRequest(a, GREEDY, max_tokens=4)])
    [second] = run(scheduler, [GenerationRequest(b, GREEDY, max_tokens=4)])  # evicts a's cache
    assert second.tokens == solo_greedy(b, 4)
    assert scheduler.snapshot().counters["evictions"] >= 1
    long_a = GenerationRequest(prompt(10, 200), GREEDY, max_tokens=100)
    long_b = GenerationRequest(prompt(11, 200), GREEDY, max_tokens=100)
    sinks = run(scheduler, [long_a, long_b])
    reasons = sorted(s.finished.reason for s in sinks if s.finished)
    assert reasons == ["error", "length"]
    failed = next(s for s in sinks if s.finished and s.finished.reason == "error")
    assert failed.finished is not None and "KV pool exhausted" in (failed.finished.error or "")
    ok = next(s for s in sinks if s.finished and s.finished.reason == "length")
    request = long_a if ok is sinks[0] else long_b
    assert ok.tokens == solo_greedy(request.prompt, 100)  # the neighbour is not corrupted


def test_cancel_frees_the_slot_at_once_and_bad_prompts_fail() -> None:
    scheduler = Scheduler(FakeBackend(n_ctx=100))
    sink = Collector()
    request = GenerationRequest(prompt(12, 20), GREEDY, max_tokens=1000)
    scheduler.submit(request, sink)
    for _ in range(3):
        scheduler.step_once()
    scheduler.cancel(request.id)
    scheduler.step_once()
    assert sink.finished is not None and sink.finished.reason == "cancelled"
    assert all(s.state == "idle" for s in scheduler.snapshot().slots)
    [too_long, empty] = run(scheduler, [GenerationRequest(prompt(1, 100)), GenerationRequest([])])
    assert too_long.finished is not None and "context" in (too_long.finished.error or "")
    assert empty.finished is not None and empty.finished.reason == "error"


def test_stop_tokens_end_generation_without_being_emitted() -> None:
    p = prompt(13, 30)
    expected = solo_greedy(p, 10)
    scheduler = Scheduler(FakeBackend())
    [sink] = run(scheduler, [GenerationRequest(p, GREEDY, 10, stop_ids=frozenset({expected[4]}))])
    cut = expected.index(expected[4])
    assert sink.tokens == expected[:cut]
    assert sink.finished is not None and sink.finished.reason == "stop"


def test_seeded_sampling_is_reproducible_across_batching() -> None:
    params = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=5)
    p = prompt(14, 40)
    [alone] = run(Scheduler(FakeBackend()), [GenerationRequest(p, params, 15)])
    others = [GenerationRequest(prompt(20 + i, 60), params, 15) for i in range(3)]
    sinks = run(
        Scheduler(FakeBackend(), SchedulerConfig(max_chunk=16)),
        [*others, GenerationRequest(p, params, 15)],
    )
    assert sinks[-1].tokens == alone.tokens


def test_engine_thread_serves_submissions() -> None:
    scheduler = Scheduler(FakeBackend())
    scheduler.start()
    try:
        sink = Collector()
        p = prompt(15, 25)
        scheduler.submit(GenerationRequest(p, GREEDY, 5), sink)
        deadline = time.monotonic() + 10
        while sink.finished is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sink.tokens == solo_greedy(p, 5)
    finally:
        scheduler.stop()


class FlakyBackend(FakeBackend):
    """Fails its first step the way a broken kernel would."""

    def __init__(self) -> None:
        super().__init__()
        self.failures = 1

    def step(self, plan: StepPlan) -> StepResult:
        if self.failures:
            self.failures -= 1
            raise RuntimeError("device fault")
        return super().step(plan)


def test_a_failed_step_fails_its_requests_and_the_engine_goes_on() -> None:
    scheduler = Scheduler(FlakyBackend())
    p = prompt(16, 20)
    [failed] = run(scheduler, [GenerationRequest(p, GREEDY, 4)])
    assert failed.finished is not None and "device fault" in (failed.finished.error or "")
    [ok] = run(scheduler, [GenerationRequest(p, GREEDY, 4)])
    assert ok.tokens == solo_greedy(p, 4)


def test_waiting_requests_learn_their_queue_position() -> None:
    scheduler = Scheduler(FakeBackend(n_slots=1))
    sinks = run(scheduler, [GenerationRequest(prompt(17 + i, 10), GREEDY, 3) for i in range(3)])
    positions = [[e.position for e in s.events if isinstance(e, Queued)] for s in sinks]
    assert positions == [[], [1], [2, 1]]


def test_share_rows_splits_the_budget_fairly() -> None:
    assert share_rows([10, 2, 10], 12) == [5, 2, 5]
    assert share_rows([3, 3], 100) == [3, 3]
    assert share_rows([5, 5, 5], 2) == [1, 1, 0]
    assert share_rows([], 10) == []


def test_every_decoding_slot_gets_a_row_even_when_drafts_fill_the_budget() -> None:
    backend = FakeBackend()
    scheduler = Scheduler(backend, SchedulerConfig(max_rows=8, n_draft=4))
    prompts = [prompt(30 + i, 12) for i in range(4)]
    sinks = run(scheduler, [GenerationRequest(p, GREEDY, 10) for p in prompts])
    assert [s.tokens for s in sinks] == [solo_greedy(p, 10) for p in prompts]
    assert all(plan.n_rows <= 8 for plan in backend.plans)
    most = max(sum(s.kind is RowKind.DECODE for s in plan.slots) for plan in backend.plans)
    assert most == 4


def test_a_new_scheduler_starts_from_an_empty_backend() -> None:
    backend = FakeBackend()
    run(
        Scheduler(backend, SchedulerConfig(checkpoint_interval=64)),
        [GenerationRequest(prompt(40, 150))],
    )
    assert backend.checkpoints and backend.pool.used_tokens > 0
    Scheduler(backend)
    assert not backend.checkpoints and backend.pool.used_tokens == 0


def test_snapshot_is_rebuilt_on_changes_and_at_most_every_interval_between(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The live figures (/v1/slots, /metrics, `openjet top`) are rebuilt when a request starts
    or ends and when the engine goes idle, and otherwise at most every PUBLISH_INTERVAL_S
    (not once per ~10 ms step)."""
    import engine.scheduler as scheduler_module

    monkeypatch.setattr(scheduler_module, "PUBLISH_INTERVAL_S", 1e9)
    scheduler = Scheduler(FakeBackend())
    sink = Collector()
    scheduler.submit(GenerationRequest(prompt(5, 10), GREEDY, max_tokens=40), sink)
    scheduler.step_once()  # admitted and prefilled: a change
    started = scheduler.snapshot()
    assert [s.state for s in started.slots if s.request_id] == ["decode"]
    for _ in range(5):
        scheduler.step_once()
    assert scheduler.snapshot() is started  # decode steps alone: not rebuilt
    monkeypatch.setattr(scheduler_module, "PUBLISH_INTERVAL_S", 0.0)
    scheduler.step_once()
    assert scheduler.snapshot() is not started  # the interval has passed
    monkeypatch.setattr(scheduler_module, "PUBLISH_INTERVAL_S", 1e9)
    while sink.finished is None:
        scheduler.step_once()
    assert all(s.state == "idle" for s in scheduler.snapshot().slots)  # the end: rebuilt


def test_a_request_without_drafts_never_builds_their_context() -> None:
    """n_draft 0 (speculation off per request, as agents send it): the draft provider, which
    would copy the whole context every step, is not called."""
    calls: list[int] = []

    def provider(context: Sequence[int], mtp: Sequence[int], n_draft: int) -> list[int]:
        calls.append(len(context))
        return []

    scheduler = Scheduler(FakeBackend(), SchedulerConfig(speculation="lookup", n_draft=3))
    request = GenerationRequest(
        prompt(6, 50), GREEDY, max_tokens=20, n_draft=0, draft_provider=provider
    )
    [sink] = run(scheduler, [request])
    assert len(sink.tokens) == 20 and calls == []
    drafted = GenerationRequest(prompt(6, 50), GREEDY, max_tokens=20, draft_provider=provider)
    [again] = run(scheduler, [drafted])
    assert again.tokens == sink.tokens and calls  # with drafts asked for, it is called


class OverlappingBackend(FakeBackend):
    """Declares overlaps_host_work and logs when the scheduler's hand-out runs."""

    overlaps_host_work = True

    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log

    def step(self, plan: StepPlan, while_running: Callable[[], None] | None = None) -> StepResult:
        self.log.append("queued")
        if while_running is not None:
            while_running()
        self.log.append("done")
        return super().step(plan)


def test_events_are_handed_out_while_the_next_step_runs() -> None:
    """A flush hook runs once per step, after the backend queued the step's work: the tokens of
    step N reach a queuing sink during step N+1; idle, the last ones go out at once."""
    log: list[str] = []
    scheduler = Scheduler(OverlappingBackend(log), SchedulerConfig(speculation="off"))
    sink = Collector()
    handed: list[int] = []

    def hook() -> None:
        log.append("flush")
        handed.append(len(sink.tokens))

    scheduler.add_flush_hook(hook)
    scheduler.submit(GenerationRequest(prompt=prompt(3, 12), max_tokens=4), sink)
    while scheduler.step_once():
        pass
    assert sink.tokens == solo_greedy(prompt(3, 12), 4)
    steps = log.count("queued")
    assert log[: 3 * steps] == ["queued", "flush", "done"] * steps
    # one token per step: at step N's hand-out the sink holds the tokens of steps 1..N-1;
    # going idle hands out the last one
    assert handed == [*range(steps), 4]
    assert log[-1] == "flush"
