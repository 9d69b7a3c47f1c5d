"""CudaBackend._passes (host code, no GPU): how a step's rows split into weight passes. Prompt
chunks with checkpoints stop at each checkpoint, the k-th pieces of all of them sharing one pass;
every slot's pieces stay in order, each row in exactly one pass; drafts ride in a pass of at most
t_save rows."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

from engine.backend import RowKind, SlotStep, StepPlan
from engine.cuda.backend import CudaBackend


def _passes(plan: StepPlan, t_save: int = 64) -> list[list[tuple[int, int, int]]]:
    backend = object.__new__(CudaBackend)
    backend.ws = SimpleNamespace(t_save=t_save)  # type: ignore[assignment]
    return [[(s.slot, a, b) for s, a, b in group] for group in backend._passes(plan)]


def _prefill(slot: int, start: int, n: int, checkpoints: tuple[int, ...] = ()) -> SlotStep:
    return SlotStep(slot, RowKind.PREFILL, tuple(range(n)), start, checkpoints=checkpoints)


def _decode(slot: int, start: int, drafts: int = 0) -> SlotStep:
    return SlotStep(slot, RowKind.DECODE, tuple(range(1 + drafts)), start)


def _covers_each_row_once_in_order(plan: StepPlan, passes: list[list[tuple[int, int, int]]]) -> None:  # fmt: skip
    for step in plan.slots:
        pieces = [(a, b) for group in passes for slot, a, b in group if slot == step.slot]
        assert pieces[0][0] == 0 and pieces[-1][1] == step.n_rows
        assert all(b == c for (_, b), (c, _) in itertools.pairwise(pieces))
        assert all(sum(1 for s, _, _ in group if s == step.slot) <= 1 for group in passes)


def test_prompts_starting_together_share_their_passes() -> None:
    # four 64-token prompts, each with a checkpoint after token 63 (the prefix cache's cut)
    plan = StepPlan(tuple(_prefill(s, 0, 64, (63,)) for s in range(4)))
    passes = _passes(plan)
    assert passes == [[(s, 0, 63) for s in range(4)], [(s, 63, 64) for s in range(4)]]
    _covers_each_row_once_in_order(plan, passes)


def test_uncut_rows_join_the_first_pieces_and_deeper_cuts_get_their_own_passes() -> None:
    plan = StepPlan((_decode(0, 100), _prefill(1, 0, 40, (10, 30)), _prefill(2, 5, 20, (15,))))
    passes = _passes(plan)
    assert passes == [[(0, 0, 1), (1, 0, 10), (2, 0, 10)], [(1, 10, 30), (2, 10, 20)], [(1, 30, 40)]]  # fmt: skip
    _covers_each_row_once_in_order(plan, passes)


def test_a_checkpoint_at_the_chunk_end_does_not_cut_it() -> None:
    plan = StepPlan((_prefill(0, 0, 32, (32,)), _decode(1, 9)))
    assert _passes(plan) == [[(0, 0, 32), (1, 0, 1)]]


def test_drafts_keep_a_pass_of_their_own_within_t_save() -> None:
    plan = StepPlan((_decode(0, 50, drafts=3), _prefill(1, 0, 80), _prefill(2, 0, 20, (12,))))
    passes = _passes(plan, t_save=64)
    assert passes == [[(1, 0, 80)], [(0, 0, 4)], [(2, 0, 12)], [(2, 12, 20)]]
    assert all(sum(b - a for _, a, b in g) <= 64 for g in passes if (0, 0, 4) in g)
    _covers_each_row_once_in_order(plan, passes)
    small = StepPlan((_decode(0, 50, drafts=3), _prefill(2, 0, 20, (12,))))
    assert _passes(small) == [[(0, 0, 4)], [(2, 0, 12)], [(2, 12, 20)]]
