"""Launch-ahead (SchedulerConfig.launch_ahead, the backend's `launch` / `collect`): while every
active slot decodes one token per step, the scheduler queues step N+1 before it reads step N
back, N+1's rows taking the tokens N drew. Against `FakeBackend` (a rolling hash of each slot's
whole sequence, so any token fed to the wrong row or any record out of step with the backend
changes what follows): the same tokens as plain steps, stops and cancels mid-flight, follow-ups
that reuse such a slot, requests arriving while steps are in flight; and the CPU reference
backend on a tiny synthetic model, greedy, on and off.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.backend import (
    GREEDY,
    BackendError,
    Launched,
    RowKind,
    SamplingParams,
    SlotStep,
    StepPlan,
    StepResult,
    check_follow,
    with_drawn_tokens,
)
from engine.scheduler import Scheduler, SchedulerConfig
from engine.scheduler_events import GenerationRequest
from tests.unit.test_scheduler import Collector, FakeBackend, prompt, run, solo_greedy

OFF = SchedulerConfig(speculation="off", max_chunk=32)


class LaunchingFakeBackend(FakeBackend):
    """FakeBackend with launch/collect: a launched step runs only when collected (in order), a
    followed one takes the tokens its predecessor drew, as the CUDA backend does on the device."""

    launches_ahead = True

    def __init__(self, **options: int) -> None:
        super().__init__(**options)
        self.queue: list[Launched] = []
        self.followed = 0  # steps launched before their predecessor was read back

    def launch(self, plan: StepPlan, follow: Launched | None = None) -> Launched:
        if follow is not None:
            check_follow(plan, follow.plan)
            assert self.queue and self.queue[-1] is follow, "follows the last launch"
            self.followed += 1
        launched = Launched(plan, follow)
        self.queue.append(launched)
        return launched

    def collect(self, launched: Launched) -> StepResult:
        assert self.queue and self.queue[0] is launched, "collected in launch order"
        self.queue.pop(0)
        follow = launched.state
        plan = launched.plan
        if isinstance(follow, Launched):  # its tokens: what the followed step drew
            assert isinstance(follow.state, StepResult), "the followed step was collected first"
            plan = with_drawn_tokens(plan, follow.state)
        result = self.step(plan)
        launched.state = result
        return result


def _records_match(scheduler: Scheduler, backend: FakeBackend) -> None:
    """What the scheduler believes each slot holds is what the backend holds."""
    for slot in scheduler.slots:
        assert slot.tokens == backend.seqs[slot.id].tokens, slot.id


def test_launched_ahead_steps_give_the_tokens_of_plain_steps() -> None:
    prompts = [prompt(40 + i, 20 + 9 * i) for i in range(4)]
    lengths = [7, 30, 12, 25]
    requests = [GenerationRequest(p, GREEDY, n) for p, n in zip(prompts, lengths, strict=True)]
    backend = LaunchingFakeBackend()
    scheduler = Scheduler(backend, OFF)
    sinks = run(scheduler, requests)
    for p, n, sink in zip(prompts, lengths, sinks, strict=True):
        assert sink.tokens == solo_greedy(p, n)
        assert sink.finished is not None and sink.finished.reason == "length"
    assert backend.followed > 20
    # a request ending on its length gets no step past it: every row is a prompt token or
    # feeds a token that is emitted
    rows = sum(plan.n_rows for plan in backend.plans)
    assert rows == sum(len(p) + n - 1 for p, n in zip(prompts, lengths, strict=True))
    _records_match(scheduler, backend)
    # launch_ahead off: the same tokens, no followed step
    plain = LaunchingFakeBackend()
    off = SchedulerConfig(speculation="off", max_chunk=32, launch_ahead=False)
    again = run(Scheduler(plain, off), requests)
    assert [s.tokens for s in again] == [s.tokens for s in sinks] and plain.followed == 0


def test_a_refused_follower_costs_no_tokens() -> None:
    """A backend that refuses a following step (its checks raise before it queues anything)
    leaves the step in flight to be read back alone: every request still gets its tokens."""

    class RefusingBackend(LaunchingFakeBackend):
        refused = 0

        def launch(self, plan: StepPlan, follow: Launched | None = None) -> Launched:
            if follow is not None and self.refused < 3:
                self.refused += 1
                raise BackendError("refused")
            return super().launch(plan, follow)

    prompts = [prompt(60 + i, 18 + 5 * i) for i in range(3)]
    backend = RefusingBackend()
    scheduler = Scheduler(backend, OFF)
    sinks = run(scheduler, [GenerationRequest(p, GREEDY, 14) for p in prompts])
    assert [s.tokens for s in sinks] == [solo_greedy(p, 14) for p in prompts]
    assert all(s.finished is not None and s.finished.reason == "length" for s in sinks)
    assert backend.refused == 3 and backend.followed > 5
    _records_match(scheduler, backend)


def test_a_stop_while_the_next_step_runs_leaves_the_slot_reusable() -> None:
    """The request stops at a token the step in flight already took as its input: the slot
    then holds that token too (as a follow-up's prompt has it next); the follow-up reuses the
    slot, processes only its new tokens and gets its solo tokens."""
    p = prompt(50, 30)
    expected = solo_greedy(p, 20)
    stop = expected[6]
    cut = expected.index(stop)
    backend = LaunchingFakeBackend()
    scheduler = Scheduler(backend, OFF)
    other = prompt(51, 25)
    first = run(
        scheduler,
        [
            GenerationRequest(p, GREEDY, 20, stop_ids=frozenset({stop})),
            GenerationRequest(other, GREEDY, 20),
        ],
    )
    assert first[0].tokens == expected[:cut]
    assert first[0].finished is not None and first[0].finished.reason == "stop"
    assert first[1].tokens == solo_greedy(other, 20)
    assert backend.followed > 0
    _records_match(scheduler, backend)
    follow_up = [*p, *expected[:cut], stop, *prompt(52, 9)]
    before = len(backend.plans)
    [second] = run(scheduler, [GenerationRequest(follow_up, GREEDY, 10)])
    assert second.tokens == solo_greedy(follow_up, 10)
    # the new tokens, then one row per token after the first
    assert sum(plan.n_rows for plan in backend.plans[before:]) == 9 + 10 - 1
    _records_match(scheduler, backend)


def test_cancel_and_new_requests_while_steps_are_in_flight() -> None:
    """A cancel lands while a step is in flight: the slot is freed once that step is read back;
    a request that arrives meanwhile waits for the steps in flight, then gets its solo tokens,
    and the others' tokens never change."""
    backend = LaunchingFakeBackend()
    scheduler = Scheduler(backend, OFF)
    prompts = [prompt(60 + i, 24) for i in range(3)]
    sinks = [Collector() for _ in prompts]
    requests = [GenerationRequest(p, GREEDY, 40) for p in prompts]
    for request, sink in zip(requests, sinks, strict=True):
        scheduler.submit(request, sink)
    for _ in range(12):
        scheduler.step_once()
    assert scheduler._inflight is not None and backend.followed > 0
    scheduler.cancel(requests[1].id)
    late = prompt(63, 17)
    late_sink = Collector()
    scheduler.submit(GenerationRequest(late, GREEDY, 15), late_sink)
    for _ in range(400):
        if not scheduler.step_once():
            break
    assert sinks[1].finished is not None and sinks[1].finished.reason == "cancelled"
    assert sinks[1].tokens == solo_greedy(prompts[1], 40)[: len(sinks[1].tokens)]
    for i in (0, 2):
        assert sinks[i].tokens == solo_greedy(prompts[i], 40)
    assert late_sink.tokens == solo_greedy(late, 15)
    assert scheduler._inflight is None and not backend.queue
    _records_match(scheduler, backend)


PENALTY = SamplingParams(temperature=0.0, repetition_penalty=1.3)


@pytest.mark.parametrize(
    "config, make",
    [
        (
            SchedulerConfig(speculation="mtp", n_draft=2, max_chunk=32),
            lambda p, n: GenerationRequest(p, GREEDY, n),
        ),
        (OFF, lambda p, n: GenerationRequest(p, PENALTY, n)),
        (OFF, lambda p, n: GenerationRequest(p, GREEDY, n, draft_provider=lambda c, m, k: [])),
    ],
    ids=["mtp", "penalties", "provider"],
)
def test_steps_that_need_the_last_tokens_are_never_launched_ahead(
    config: SchedulerConfig, make: Callable[[list[int], int], GenerationRequest]
) -> None:
    """Drafts (MTP or a provider) and penalties need the tokens of the step before: every step
    is read back before the next is planned, with the same tokens as plain steps."""
    p = prompt(70, 30)
    backend = LaunchingFakeBackend()
    [sink] = run(Scheduler(backend, config), [make(p, 12)])
    [want] = run(Scheduler(FakeBackend(), config), [make(p, 12)])
    assert sink.tokens == want.tokens and len(sink.tokens) == 12
    assert backend.followed == 0


def test_only_one_row_decode_groups_may_follow() -> None:
    before = StepPlan((SlotStep(0, RowKind.DECODE, (5,), 10),))
    check_follow(StepPlan((SlotStep(0, RowKind.DECODE, (0,), 11),)), before)
    for bad in (
        SlotStep(0, RowKind.DECODE, (0, 3), 11),  # drafts
        SlotStep(0, RowKind.DECODE, (0,), 12),  # not where the followed step ended
        SlotStep(1, RowKind.DECODE, (0,), 0),  # not in the followed step
        SlotStep(0, RowKind.PREFILL, (0,), 11),
        SlotStep(0, RowKind.DECODE, (0,), 11, SamplingParams(repetition_penalty=1.2)),
    ):
        with pytest.raises(BackendError):
            check_follow(StepPlan((bad,)), before)


def test_the_reference_backend_launches_ahead_with_the_same_tokens(tmp_path: Path) -> None:
    from engine.reference_backend import ReferenceBackend
    from engine.synthetic import write_synthetic

    path = write_synthetic(tmp_path / "tiny.gguf", "tiny", "f32", 3)
    prompts = [prompt(80 + i, 12 + 5 * i) for i in range(3)]
    out = []
    for ahead in (False, True):
        backend = ReferenceBackend.from_gguf(path, n_slots=4, launch_ahead=ahead)
        scheduler = Scheduler(backend, SchedulerConfig(speculation="off"))
        sinks = run(scheduler, [GenerationRequest(p, GREEDY, 10) for p in prompts])
        out.append([s.tokens for s in sinks])
        for slot in scheduler.slots:
            assert len(slot.tokens) == backend.slot_length(slot.id)
    assert out[0] == out[1] and all(len(t) == 10 for t in out[1])


def test_the_benchmarks_speculation_off_requests_launch_ahead() -> None:
    """bench/parallel.py's server (`serve_main`) replaces the scheduler's draft policy with
    FilledDrafts and forces acceptance; its speculation-off figures come from requests asking
    for no drafts (`n_draft` 0): those launch ahead (on the H200 the scheduler read DraftPolicy's
    `mode` off FilledDrafts, which failed every such request, v21d)."""
    from bench.parallel import FilledDrafts

    config = SchedulerConfig(speculation="lookup", n_draft=3, force_accept=True, max_chunk=32)
    prompts = [prompt(110 + i, 30) for i in range(2)]
    backend = LaunchingFakeBackend()
    scheduler = Scheduler(backend, config)
    scheduler.policy = FilledDrafts(3)  # type: ignore[assignment]
    sinks = run(scheduler, [GenerationRequest(p, GREEDY, 16, n_draft=0) for p in prompts])
    assert [s.tokens for s in sinks] == [solo_greedy(p, 16) for p in prompts]
    assert backend.followed > 10


def test_every_launch_hands_out_the_tokens_drawn_before_it() -> None:
    """Between two launches the flush hook runs: the tokens of the last plain step (a prompt's
    first token, when the slots start launching ahead) reach a queuing sink while the first
    launched step runs, not only after the step that follows it is launched as well."""
    log: list[str] = []

    class LoggingBackend(LaunchingFakeBackend):
        def launch(self, plan: StepPlan, follow: Launched | None = None) -> Launched:
            log.append("launch")
            return super().launch(plan, follow)

    scheduler = Scheduler(LoggingBackend(), OFF)
    scheduler.add_flush_hook(lambda: log.append("flush"))
    sinks = run(scheduler, [GenerationRequest(prompt(70 + i, 12), GREEDY, 9) for i in range(3)])
    assert [s.tokens for s in sinks] == [solo_greedy(prompt(70 + i, 12), 9) for i in range(3)]
    launches = [i for i, entry in enumerate(log) if entry == "launch"]
    assert len(launches) > 5
    for a, b in itertools.pairwise(launches):
        assert "flush" in log[a + 1 : b], f"launches at {a} and {b} with no hand-out between"
