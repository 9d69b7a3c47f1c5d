"""CudaBackend's launch-ahead (`launch` / `collect`, engine/backend.py): a step launched before
the one it follows is read back takes that step's drawn tokens on the device, and gives the
tokens of plain steps, directly and through the scheduler (stops and length ends in flight).
"""

from __future__ import annotations

import pytest

from engine.backend import GREEDY, BackendError, Launched, RowKind, SlotStep, StepPlan
from engine.cuda.backend import CudaBackend
from engine.cuda.model import from_gguf
from engine.gguf_file import open_gguf
from engine.scheduler import Scheduler, SchedulerConfig
from engine.scheduler_events import GenerationRequest
from engine.synthetic import write_synthetic
from tests.support.accuracy_cases import prompt
from tests.unit.test_scheduler import run

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> CudaBackend:
    path = write_synthetic(tmp_path_factory.mktemp("ahead") / "tiny.gguf", "tiny", "q4_k_m", 3)
    return CudaBackend(from_gguf(open_gguf(path)), n_slots=4, kv_tokens=4096, use_mtp=False)


def _prefill(backend: CudaBackend, prompts: dict[int, tuple[int, ...]]) -> dict[int, int]:
    for slot in prompts:
        backend.reset_slot(slot)
    plan = StepPlan(tuple(SlotStep(s, RowKind.PREFILL, p, 0, GREEDY) for s, p in prompts.items()))
    result = backend.step(plan)
    return {s: result.for_slot(s).accepted[-1] for s in prompts}


def _decode_plan(backend: CudaBackend, tokens: dict[int, int]) -> StepPlan:
    return StepPlan(
        tuple(
            SlotStep(s, RowKind.DECODE, (t,), backend.slot_length(s), GREEDY)
            for s, t in tokens.items()
        )
    )


def test_followed_launches_give_the_tokens_of_plain_steps(backend: CudaBackend) -> None:
    assert backend.launches_ahead
    n_vocab = backend.n_vocab
    prompts = {s: prompt(90 + s, 20 + 11 * s, n_vocab) for s in range(3)}
    last = _prefill(backend, prompts)
    plain = {s: [t] for s, t in last.items()}
    for _ in range(11):
        result = backend.step(_decode_plan(backend, {s: t[-1] for s, t in plain.items()}))
        for s in plain:
            plain[s] += result.for_slot(s).accepted
    lengths = {s: backend.slot_length(s) for s in prompts}

    last = _prefill(backend, prompts)
    ahead = {s: [t] for s, t in last.items()}
    inflight = backend.launch(_decode_plan(backend, last))
    for _ in range(10):  # each launched before the one it follows is read back
        start = {s.slot: s.end_pos for s in inflight.plan.slots}
        placeholder = StepPlan(
            tuple(SlotStep(s, RowKind.DECODE, (0,), p, GREEDY) for s, p in start.items())
        )
        following = backend.launch(placeholder, inflight)
        result = backend.collect(inflight)
        for s in ahead:
            ahead[s] += result.for_slot(s).accepted
        inflight = following
    result = backend.collect(inflight)
    for s in ahead:
        ahead[s] += result.for_slot(s).accepted
    assert ahead == plain
    assert {s: backend.slot_length(s) for s in prompts} == lengths


def test_only_one_row_decode_groups_follow(backend: CudaBackend) -> None:
    last = _prefill(backend, {0: prompt(95, 16, backend.n_vocab)})
    first = backend.launch(_decode_plan(backend, last))
    drafts = StepPlan((SlotStep(0, RowKind.DECODE, (0, 1), backend.slot_length(0), GREEDY),))
    with pytest.raises(BackendError):
        backend.launch(drafts, first)
    backend.collect(first)


def test_the_scheduler_gets_the_same_tokens_with_steps_launched_ahead(
    backend: CudaBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four requests, one ending on a stop token while the next step is in flight, the others
    on lengths: the same tokens with launch-ahead on and off, and on it launches ahead."""
    n_vocab = backend.n_vocab
    prompts = [list(prompt(100 + i, 15 + 8 * i, n_vocab)) for i in range(4)]
    off = SchedulerConfig(speculation="off", launch_ahead=False)
    [probe] = run(Scheduler(backend, off), [GenerationRequest(prompts[0], GREEDY, 12)])
    stop = frozenset({probe.tokens[8]})
    lengths = [24, 9, 17, 24]

    def requests() -> list[GenerationRequest]:
        return [
            GenerationRequest(p, GREEDY, n, stop_ids=stop if i == 0 else frozenset())
            for i, (p, n) in enumerate(zip(prompts, lengths, strict=True))
        ]

    launches: list[bool] = []
    launch = backend.launch

    def counted(plan: StepPlan, follow: Launched | None = None) -> Launched:
        launches.append(follow is not None)
        return launch(plan, follow)

    monkeypatch.setattr(backend, "launch", counted)
    out = {}
    for ahead in (False, True):
        config = SchedulerConfig(speculation="off", launch_ahead=ahead)
        sinks = run(Scheduler(backend, config), requests())
        out[ahead] = [s.tokens for s in sinks]
        assert sinks[0].finished is not None and sinks[0].finished.reason == "stop"
        assert [len(t) for t in out[ahead][1:]] == lengths[1:]
        assert (sum(launches) > 10) == ahead
    assert out[True] == out[False]
    assert out[True][0] == probe.tokens[: probe.tokens.index(probe.tokens[8])]


def test_launched_is_the_contracts_handle(backend: CudaBackend) -> None:
    last = _prefill(backend, {1: prompt(97, 12, backend.n_vocab)})
    launched = backend.launch(_decode_plan(backend, last))
    assert isinstance(launched, Launched)
    assert len(backend.collect(launched).for_slot(1).accepted) == 1
