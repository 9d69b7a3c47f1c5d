"""Where speculative draft tokens come from: the MTP head (inside the backend's step) and prompt
lookup (an n-gram match in the slot's own context, computed here on the host).

A `DraftPolicy` turns a slot's context and the MTP proposals of the last step into the drafts of
its next decode group. Mode "mtp+lookup" prefers a lookup continuation (agents re-emit code they
have read, where lookup drafts are long and cheap) and falls back to the MTP proposals.
`ScriptedDrafts` is the test and benchmark provider that proposes a known continuation, which
makes the verification path accept every draft when it equals the model's own greedy output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

DRAFT_MODES = ("off", "mtp", "lookup", "mtp+lookup")

# context, MTP proposals from the last step, most drafts wanted -> drafts for the next group
DraftProvider = Callable[[Sequence[int], Sequence[int], int], list[int]]


def prompt_lookup(
    context: Sequence[int] | np.ndarray, n_draft: int, ngram_max: int = 3, ngram_min: int = 2
) -> list[int]:
    """Drafts that follow the latest earlier occurrence of the context's last n-gram.

    Tries the longest n-gram first (ngram_max down to ngram_min); returns [] when nothing matches.
    """
    if n_draft <= 0:
        return []
    tokens = np.asarray(context, dtype=np.int64)
    total = tokens.shape[0]
    for n in range(min(ngram_max, total - 1), ngram_min - 1, -1):
        tail = tokens[total - n :]
        # candidate starts s (s + n < total) where tokens[s:s+n] == tail; newest first
        windows = np.lib.stride_tricks.sliding_window_view(tokens[: total - 1], n)
        hits = np.flatnonzero((windows == tail).all(axis=1))
        hits = hits[hits + n < total]
        if hits.size:
            start = int(hits[-1]) + n
            return [int(t) for t in tokens[start : start + n_draft]]
    return []


@dataclass(frozen=True)
class DraftPolicy:
    """Chooses a slot's next drafts from the configured sources."""

    mode: str = "mtp"
    n_draft: int = 2

    def __post_init__(self) -> None:
        if self.mode not in DRAFT_MODES:
            raise ValueError(f"speculation mode {self.mode!r}: expected one of {DRAFT_MODES}")

    @property
    def needs_context(self) -> bool:
        """False when the drafts never look at the context (so the caller need not build it)."""
        return self.mode in ("lookup", "mtp+lookup") and self.n_draft > 0

    @property
    def uses_mtp(self) -> bool:
        return self.mode in ("mtp", "mtp+lookup") and self.n_draft > 0

    def proposes(self, n_draft: int, has_mtp: bool) -> bool:
        """Whether a call asking for n_draft drafts may return any, where the backend runs the
        MTP head or not (the scheduler launches a step ahead only for slots that cannot draft)."""
        if self.mode == "off" or min(n_draft, self.n_draft) <= 0:
            return False
        return self.mode != "mtp" or has_mtp

    def __call__(self, context: Sequence[int], mtp: Sequence[int], n_draft: int) -> list[int]:
        limit = min(n_draft, self.n_draft)
        if self.mode == "off" or limit <= 0:
            return []
        if self.mode in ("lookup", "mtp+lookup"):
            found = prompt_lookup(context, limit)
            if found or self.mode == "lookup":
                return found
        return list(mtp[:limit])


class ScriptedDrafts:
    """Proposes the known continuation of each scripted sequence (forced-acceptance tests)."""

    def __init__(self, sequences: Sequence[Sequence[int]], n_draft: int) -> None:
        self._sequences = [list(s) for s in sequences]
        self.n_draft = n_draft
        self.proposed = 0

    def __call__(self, context: Sequence[int], mtp: Sequence[int], n_draft: int) -> list[int]:
        limit = min(n_draft, self.n_draft)
        n = len(context)
        for sequence in self._sequences:
            if len(sequence) > n and sequence[:n] == list(context):
                drafts = sequence[n : n + limit]
                self.proposed += len(drafts)
                return drafts
        return []
