"""The CPU backend: the backend contract of `engine/backend.py` over the numpy reference model.

Each slot holds a `SequenceState` of `engine/reference.py`; slots run one after another inside a
step (numpy gains nothing from batching them), so a slot's tokens cannot depend on its
neighbours. The KV itself lives in each `SequenceState`; the shared `PagedKVPool` does the
accounting so the pool limit, eviction and exhaustion behave as on the GPU.

Speculation: a decode group (y, d1..dn) runs in one forward; on a rejected draft the state goes
back to a snapshot taken before the step (DeltaNet states copied, attention KV truncated) and
only the accepted rows are run again — the recurrence is replayed, never stored per draft row.
MTP drafts: the head catches up lazily on the trunk hiddens it has not consumed, then chains
`n_draft` greedy proposals and drops their speculative KV rows.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.backend import (
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
    with_drawn_tokens,
)
from engine.reference import ReferenceModel
from engine.reference_state import DeltaNetState, KVCache, SequenceState
from engine.sampling import sample, verify
from engine.state import PagedKVPool, PoolExhausted

DEFAULT_KV_TOKENS = 16384  # the CPU backend's pool; the reference is for small models


@dataclass
class _Sequence:
    """A slot's (or checkpoint's) state plus the trunk hiddens the MTP head has not consumed."""

    state: SequenceState
    tokens: list[int] = field(default_factory=list)  # every token in the trunk state
    hidden: list[np.ndarray] = field(default_factory=list)  # rows for positions mtp_n_past..

    def copy(self) -> _Sequence:
        return _Sequence(self.state.copy(), list(self.tokens), [h.copy() for h in self.hidden])


def _snapshot(state: SequenceState) -> list[Any]:
    """What undoing a forward needs: DeltaNet states copied, attention KV lengths."""
    return [
        layer.copy() if isinstance(layer, DeltaNetState) else layer.length for layer in state.layers
    ]


def _rollback(state: SequenceState, snapshot: list[Any], n_past: int) -> None:
    for index, saved in enumerate(snapshot):
        layer = state.layers[index]
        if isinstance(layer, KVCache):
            layer.truncate(saved)
        else:
            state.layers[index] = saved
    state.n_past = n_past


class ReferenceBackend:
    """Backend over `ReferenceModel`: exact f32 math on the CPU."""

    kind = "reference"
    overlaps_host_work = True  # step(plan, while_running=...): see engine/backend.py

    def __init__(
        self,
        model: ReferenceModel,
        tokenizer: Any,
        chat_template: Any,
        model_name: str,
        n_slots: int = 4,
        kv_tokens: int = DEFAULT_KV_TOKENS,
        page_size: int = 16,
        max_rows: int = 512,
        launch_ahead: bool = False,
    ) -> None:
        # launch/collect (engine/backend.py `launches_ahead`): nothing to overlap on the CPU,
        # so off by default; tests turn it on to run the scheduler's launch-ahead path
        self.launches_ahead = launch_ahead
        self.model = model
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.model_name = model_name
        self.n_slots = n_slots
        self.max_rows = max_rows
        self.n_vocab = model.n_vocab
        self._pool = PagedKVPool(kv_tokens, page_size)
        self.n_ctx = min(model.config.context_length, self._pool.total_tokens)
        self._slots = [self._fresh() for _ in range(n_slots)]
        self._checkpoints: dict[int, _Sequence] = {}
        self._next_checkpoint = 1
        self.has_mtp = model.weights.mtp is not None

    @classmethod
    def from_gguf(cls, path: str | Path, **options: Any) -> ReferenceBackend:
        """Load a GGUF: weights, tokenizer and chat template (raises GGUFError on a bad file)."""
        from engine.chat import ChatTemplate
        from engine.gguf_file import open_gguf
        from engine.tokenizer import Tokenizer

        gguf = open_gguf(path)
        name = Path(path).name
        return cls(
            ReferenceModel(gguf),
            Tokenizer.from_gguf(gguf),
            ChatTemplate.from_gguf(gguf),
            name,
            **options,
        )

    @property
    def pool(self) -> PagedKVPool:
        return self._pool

    def _fresh(self) -> _Sequence:
        return _Sequence(self.model.new_state())

    # -- slot state ----------------------------------------------------------------------------

    def slot_length(self, slot: int) -> int:
        return self._slots[self._checked_slot(slot)].state.n_past

    def reset_slot(self, slot: int) -> None:
        self._slots[self._checked_slot(slot)] = self._fresh()
        self._pool.release(slot)

    def save_checkpoint(self, slot: int) -> int:
        checkpoint = self._next_checkpoint
        self._next_checkpoint += 1
        self._checkpoints[checkpoint] = self._slots[self._checked_slot(slot)].copy()
        self._pool.share(slot, ("ckpt", checkpoint))
        return checkpoint

    def restore_checkpoint(self, slot: int, checkpoint: int) -> None:
        if checkpoint not in self._checkpoints:
            raise BackendError(f"no checkpoint {checkpoint}")
        self._slots[self._checked_slot(slot)] = self._checkpoints[checkpoint].copy()
        self._pool.share(("ckpt", checkpoint), slot)

    def free_checkpoint(self, checkpoint: int) -> None:
        self._checkpoints.pop(checkpoint, None)
        self._pool.release(("ckpt", checkpoint))

    def memory_info(self) -> MemoryInfo:
        return MemoryInfo()

    def close(self) -> None:
        self._slots = [self._fresh() for _ in range(self.n_slots)]
        self._checkpoints.clear()

    def _checked_slot(self, slot: int) -> int:
        if not 0 <= slot < self.n_slots:
            raise BackendError(f"no slot {slot} (backend has {self.n_slots})")
        return slot

    # -- the step ------------------------------------------------------------------------------

    def step(self, plan: StepPlan, while_running: Callable[[], None] | None = None) -> StepResult:
        started = time.perf_counter()
        check_plan(plan, self.n_slots, [s.state.n_past for s in self._slots], self.max_rows)
        for step in plan.slots:
            if step.end_pos > self.n_ctx:
                raise BackendError(
                    f"slot {step.slot}: {step.end_pos} tokens exceed the context {self.n_ctx}"
                )
        needed = sum(self._pool.pages_needed(s.slot, s.end_pos) for s in plan.slots)
        if needed > self._pool.free_pages:
            raise PoolExhausted(needed * self._pool.page_size, self._pool.free_tokens)
        if while_running is not None:  # the plan is valid: the work starts now
            while_running()
        results = [
            self._prefill(s) if s.kind is RowKind.PREFILL else self._decode(s) for s in plan.slots
        ]
        return StepResult(results, time.perf_counter() - started)

    def launch(self, plan: StepPlan, follow: Launched | None = None) -> Launched:
        """`step` at once (the CPU has nothing to overlap); a followed plan takes the tokens the
        followed step drew."""
        if follow is not None:
            check_follow(plan, follow.plan)
            plan = with_drawn_tokens(plan, follow.state)
        return Launched(plan, self.step(plan))

    def collect(self, launched: Launched) -> StepResult:
        result: StepResult = launched.state
        return result

    def _forward(self, step: SlotStep, tokens: tuple[int, ...]) -> np.ndarray:
        seq = self._slots[step.slot]
        self._pool.extend(step.slot, seq.state.n_past + len(tokens))
        out = self.model.forward(seq.state, tokens)
        seq.tokens.extend(tokens)
        if self.has_mtp:
            seq.hidden.extend(out.hidden)
        return np.asarray(out.logits)

    def _prefill(self, step: SlotStep) -> SlotResult:
        result = SlotResult(step.slot, [], n_rows=step.n_rows)
        cuts = [c - step.start_pos for c in step.checkpoints if c < step.end_pos]
        logits: list[np.ndarray] = []
        begin = 0
        for cut in [*cuts, step.n_rows]:
            logits.append(self._forward(step, step.tokens[begin:cut]))
            begin = cut
            if cut < step.n_rows or step.end_pos in step.checkpoints:
                result.checkpoints.append((step.start_pos + cut, self.save_checkpoint(step.slot)))
        if step.sample:
            context = [*step.penalty_context, *step.tokens]
            token = sample(logits[-1][-1], step.sampling, step.end_pos, context)
            result.accepted = [token]
            result.drafts = self._mtp_drafts(step.slot, token, step.n_draft)
        if step.return_logits:
            result.logits = np.concatenate(logits)
        return result

    def _decode(self, step: SlotStep) -> SlotResult:
        seq = self._slots[step.slot]
        snapshot = _snapshot(seq.state)
        logits = self._forward(step, step.tokens)
        n_drafts = step.n_rows - 1
        if step.force_accept:
            last = sample(
                logits[-1], step.sampling, step.end_pos, [*step.penalty_context, *step.tokens]
            )
            accepted, kept = [*step.drafts, last], n_drafts
        else:
            accepted, kept = verify(
                logits, step.tokens, step.start_pos, step.sampling, step.penalty_context
            )
        if kept < n_drafts:
            self._replay(step, snapshot, kept + 1)
        result = SlotResult(step.slot, accepted, n_rows=step.n_rows, n_draft_accepted=kept)
        result.drafts = self._mtp_drafts(step.slot, accepted[-1], step.n_draft)
        if step.return_logits:
            result.logits = logits
        return result

    def _replay(self, step: SlotStep, snapshot: list[Any], n_rows: int) -> None:
        """Undo the decode group and run only its first n_rows (the accepted ones) again."""
        seq = self._slots[step.slot]
        hidden = seq.hidden[len(seq.hidden) - step.n_rows :] if self.has_mtp else []
        del seq.tokens[step.start_pos :]
        if self.has_mtp:
            del seq.hidden[len(seq.hidden) - step.n_rows :]
        _rollback(seq.state, snapshot, step.start_pos)
        self.model.forward(seq.state, step.tokens[:n_rows])
        seq.tokens.extend(step.tokens[:n_rows])
        seq.hidden.extend(hidden[:n_rows])  # rows before a rejection do not depend on it
        self._pool.truncate(step.slot, step.start_pos + n_rows)

    def _mtp_drafts(self, slot: int, token: int, n_draft: int) -> list[int]:
        """Greedy MTP proposals following `token` (the sampled, not yet processed one)."""
        if n_draft <= 0 or not self.has_mtp:
            return []
        seq = self._slots[slot]
        state = seq.state
        caught_up = state.mtp_n_past
        if state.n_past - caught_up > 1:  # catch up positions caught_up+1 .. n_past-1
            rows = seq.tokens[caught_up + 1 : state.n_past]
            self.model.mtp_forward(state, rows, np.stack(seq.hidden[: len(rows)]))
            del seq.hidden[: len(rows)]
        out = self.model.mtp_forward(state, [token], seq.hidden[-1][None, :])
        seq.hidden.clear()  # positions < n_past are all consumed now
        drafts = [int(np.argmax(out.logits[-1]))]
        while len(drafts) < n_draft:
            out = self.model.mtp_forward(state, [drafts[-1]], out.hidden[-1:])
            drafts.append(int(np.argmax(out.logits[-1])))
        state.truncate_mtp(state.n_past)
        return drafts
