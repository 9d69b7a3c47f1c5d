"""The backend contract: what the scheduler asks of an inference backend, one step at a time.

A backend owns the weights and every slot's sequence state (attention KV in the shared paged
pool of `engine/state.py`, DeltaNet conv + recurrent state, MTP KV) and executes a `StepPlan`:
for each active slot either a prefill chunk or a decode group, all in one weight pass. Sampling,
speculative verification and state rollback happen inside the step; the host gets back only the
accepted tokens, the next MTP drafts and counters (`StepResult`).

Positions and lengths: a slot's *length* is the number of tokens whose state it holds (llama.cpp's
n_past); `SlotStep.start_pos` must equal it. After a prefill chunk the length grows by the chunk;
after a decode group `(y, d1..dn)` it becomes `start_pos + 1 + k` where k drafts were accepted,
and the step returns `accepted = [d1..dk, t]` — t, the newly sampled token, is *not* yet in the
state: it is the first token of the slot's next decode group.

Randomness: the random numbers used to pick the token at position p depend only on
`(SamplingParams.seed, p)` (counter-based), so a seeded request gives the same tokens however it
is batched, chunked or speculated (exactly so for greedy; for temperature > 0 speculation keeps
the distribution, not the individual draws).

Implemented by `engine/reference_backend.py` (numpy, CPU) and `engine/cuda/backend.py`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from engine.state import PagedKVPool

PENALTY_LAST_N = 64  # llama.cpp's default window for repetition/presence/frequency penalties
MAX_DRAFT = 4  # MTP drafts per slot per step (issue 5: 0–4)


class BackendError(RuntimeError):
    """A backend could not execute a request (bad plan, unknown slot or checkpoint)."""


@dataclass(frozen=True)
class SamplingParams:
    """How to pick tokens for one request. temperature <= 0 means greedy (argmax).

    The sampler chain follows llama.cpp: penalties → top_k → top_p → min_p → temperature →
    draw. top_k = 0 means no cap, top_p = 1 and min_p = 0 disable their filters.
    """

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    penalty_last_n: int = PENALTY_LAST_N
    seed: int = 0

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    @property
    def has_penalties(self) -> bool:
        return (
            self.presence_penalty != 0.0
            or self.frequency_penalty != 0.0
            or self.repetition_penalty != 1.0
        ) and self.penalty_last_n > 0

    def problems(self) -> list[str]:
        """What is out of range, as messages naming the field (empty when valid)."""
        checks: list[tuple[str, bool]] = [
            (
                "temperature must be a finite number >= 0",
                math.isfinite(self.temperature) and self.temperature >= 0.0,
            ),
            ("top_k must be >= 0", self.top_k >= 0),
            ("top_p must be in (0, 1]", 0.0 < self.top_p <= 1.0),
            ("min_p must be in [0, 1]", 0.0 <= self.min_p <= 1.0),
            ("presence_penalty must be in [-2, 2]", -2.0 <= self.presence_penalty <= 2.0),
            ("frequency_penalty must be in [-2, 2]", -2.0 <= self.frequency_penalty <= 2.0),
            ("repetition_penalty must be > 0", self.repetition_penalty > 0.0),
            ("penalty_last_n must be >= 0", self.penalty_last_n >= 0),
        ]
        return [message for message, ok in checks if not ok]


GREEDY = SamplingParams(temperature=0.0, top_k=0, top_p=1.0, min_p=0.0)


class RowKind(StrEnum):
    PREFILL = "prefill"
    DECODE = "decode"


@dataclass(frozen=True)
class SlotStep:
    """The rows one slot contributes to a step.

    tokens: prefill — a chunk of the prompt; decode — (last accepted token, *draft tokens).
    start_pos: position of tokens[0]; must equal the slot's current length.
    sample: prefill — True only on the prompt's final chunk (then the first new token is
        sampled from the last row); decode — always True.
    n_draft: MTP draft tokens the backend should propose for this slot's next decode group
        (0 = none; the scheduler may supply prompt-lookup drafts itself instead).
    penalty_context: the last `sampling.penalty_last_n` tokens of the context before tokens[0]
        (prompt and generated alike); the backend extends it with the rows it accepts.
    checkpoints: slot lengths in (start_pos, start_pos + len(tokens)] after which the backend
        saves a checkpoint (prefill only); their ids come back in `SlotResult.checkpoints`.
    force_accept: benchmark mode — accept every draft without verification (n_draft + 1
        tokens per step, output no longer the model's).
    return_logits: debug — return this slot's logits rows in `SlotResult.logits`.
    """

    slot: int
    kind: RowKind
    tokens: tuple[int, ...]
    start_pos: int
    sampling: SamplingParams = GREEDY
    sample: bool = True
    n_draft: int = 0
    penalty_context: tuple[int, ...] = ()
    checkpoints: tuple[int, ...] = ()
    force_accept: bool = False
    return_logits: bool = False

    @property
    def n_rows(self) -> int:
        return len(self.tokens)

    @property
    def drafts(self) -> tuple[int, ...]:
        """The draft tokens of a decode group (empty for prefill)."""
        return self.tokens[1:] if self.kind is RowKind.DECODE else ()

    @property
    def end_pos(self) -> int:
        return self.start_pos + len(self.tokens)


@dataclass(frozen=True)
class StepPlan:
    """Every slot's rows for one weight pass; each slot appears at most once."""

    slots: tuple[SlotStep, ...]

    @property
    def n_rows(self) -> int:
        return sum(s.n_rows for s in self.slots)


@dataclass
class SlotResult:
    """What one slot got from a step."""

    slot: int
    accepted: list[int]  # new tokens, in order: accepted drafts then the sampled token
    drafts: list[int] = field(default_factory=list)  # MTP proposals for the next decode group
    n_rows: int = 0
    n_draft_accepted: int = 0
    checkpoints: list[tuple[int, int]] = field(default_factory=list)  # (length, checkpoint id)
    logits: np.ndarray | None = None  # float32 [n_rows, n_vocab] when return_logits


@dataclass
class StepResult:
    slots: list[SlotResult]
    elapsed_s: float = 0.0

    @property
    def n_rows(self) -> int:
        return sum(r.n_rows for r in self.slots)

    def for_slot(self, slot: int) -> SlotResult:
        for result in self.slots:
            if result.slot == slot:
                return result
        raise KeyError(slot)


@dataclass(frozen=True)
class MemoryInfo:
    """Device memory, when the backend has a device (None on the CPU)."""

    used_bytes: int | None = None
    total_bytes: int | None = None


@runtime_checkable
class Backend(Protocol):
    """An inference backend: weights, per-slot state and the step executor."""

    kind: str  # "megakernel" | "reference"
    model_name: str
    n_slots: int
    n_ctx: int  # most tokens one slot may hold (model context, capped by the pool)
    n_vocab: int
    max_rows: int  # most rows one step accepts
    tokenizer: Any  # engine.tokenizer.Tokenizer
    chat_template: Any  # engine.chat.ChatTemplate
    # Optional: `max_checkpoints: int` — most checkpoints the backend can hold at once; the
    # scheduler evicts least-recently-used ones beyond it (default: its own limit, 32).
    # Optional: `row_quantum: int` — rows a step's cost grows in steps of (the CUDA row
    # kernels' n-tile, 8); the scheduler trims prompt rows beside decoding slots so a step does
    # not spill a few rows into the next quantum (default 1: no trimming).
    # Optional: `overlaps_host_work: bool` — True when `step` takes a keyword
    # `while_running: Callable[[], None] | None` and calls it once, after the step's work is
    # queued on the device and before it waits for it (the scheduler hands out the previous
    # step's tokens then, so the server streams them while the device works).
    # Optional: `launches_ahead: bool` — True when the backend also has
    # `launch(plan, follow: Launched | None = None) -> Launched` and
    # `collect(launched) -> StepResult`: `step` in two halves, so the scheduler can queue the
    # next step before it reads this one back and the device never waits for the host between
    # two decode steps. A plan launched with `follow=` the step before it holds only one-row
    # decode groups (`check_follow`); their tokens are placeholders: each row takes the token
    # the followed step drew for its slot, on the device. Launched steps are collected in
    # order; `launch` validates the plan as `step` does (nothing changes when it raises).

    @property
    def pool(self) -> PagedKVPool:
        """The shared paged KV pool; owners are slot ids (int) and checkpoints ("ckpt", id)."""
        ...

    def step(self, plan: StepPlan) -> StepResult:
        """Run every slot's rows in one pass; raises BackendError (or PoolExhausted) before
        changing any state when the plan is invalid or does not fit."""
        ...

    def slot_length(self, slot: int) -> int: ...

    def reset_slot(self, slot: int) -> None:
        """Forget the slot's sequence (its pages go back to the pool)."""
        ...

    def save_checkpoint(self, slot: int) -> int:
        """Snapshot the slot's state at its current length; returns the checkpoint id."""
        ...

    def restore_checkpoint(self, slot: int, checkpoint: int) -> None:
        """Replace the slot's state with a checkpoint's (the checkpoint stays)."""
        ...

    def free_checkpoint(self, checkpoint: int) -> None: ...

    def memory_info(self) -> MemoryInfo: ...

    def close(self) -> None: ...


def check_plan(plan: StepPlan, n_slots: int, lengths: Sequence[int], max_rows: int) -> None:
    """Validate a plan against the slots' current lengths; raises BackendError naming the slot."""
    seen: set[int] = set()
    if plan.n_rows > max_rows:
        raise BackendError(f"plan has {plan.n_rows} rows, the backend takes at most {max_rows}")
    for step in plan.slots:
        where = f"slot {step.slot}"
        if not 0 <= step.slot < n_slots:
            raise BackendError(f"{where}: no such slot (backend has {n_slots})")
        if step.slot in seen:
            raise BackendError(f"{where}: appears twice in one plan")
        seen.add(step.slot)
        if not step.tokens:
            raise BackendError(f"{where}: no rows")
        if step.start_pos != lengths[step.slot]:
            raise BackendError(
                f"{where}: start_pos {step.start_pos} != slot length {lengths[step.slot]}"
            )
        if not 0 <= step.n_draft <= MAX_DRAFT:
            raise BackendError(f"{where}: n_draft {step.n_draft} outside 0..{MAX_DRAFT}")
        if step.kind is RowKind.DECODE and not step.sample:
            raise BackendError(f"{where}: a decode group always samples")
        for length in step.checkpoints:
            if not step.start_pos < length <= step.end_pos:
                raise BackendError(f"{where}: checkpoint length {length} outside the chunk")


@dataclass
class Launched:
    """A step a backend has queued and not yet collected (the `launches_ahead` contract above):
    its plan and whatever the backend needs to finish it."""

    plan: StepPlan
    state: Any = None


def check_follow(plan: StepPlan, previous: StepPlan) -> None:
    """A plan may follow `previous` (take the tokens it drew as its input) when every step is a
    one-row decode group without drafts, penalties or logits, whose slot ran one sampled
    one-row decode group in `previous` ending where this one starts; BackendError otherwise."""
    before = {s.slot: s for s in previous.slots}
    for step in plan.slots:
        where = f"slot {step.slot}"
        if step.kind is not RowKind.DECODE or step.n_rows != 1 or step.n_draft:
            raise BackendError(f"{where}: only one-row decode groups without drafts can follow")
        if step.sampling.has_penalties or step.return_logits:
            raise BackendError(f"{where}: penalties and logits cannot follow")
        prior = before.get(step.slot)
        if prior is None or prior.kind is not RowKind.DECODE or prior.n_rows != 1:
            raise BackendError(f"{where}: the followed step drew no single token for it")
        if step.start_pos != prior.end_pos:
            raise BackendError(f"{where}: start_pos {step.start_pos} != {prior.end_pos}")


def with_drawn_tokens(plan: StepPlan, drawn: StepResult) -> StepPlan:
    """The plan with each step's token replaced by the one `drawn` holds for its slot (what a
    following plan's rows take)."""
    return StepPlan(
        tuple(replace(s, tokens=(drawn.for_slot(s.slot).accepted[-1],)) for s in plan.slots)
    )
