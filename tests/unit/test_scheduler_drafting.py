"""Draft sources: prompt lookup (n-gram match in the slot's own context) and the policy."""

from __future__ import annotations

import pytest

from engine.drafting import DraftPolicy, ScriptedDrafts, prompt_lookup


def test_prompt_lookup_continues_the_latest_match_of_the_longest_ngram() -> None:
    context = [1, 2, 3, 4, 5, 9, 2, 3, 7, 8, 6, 2, 3]
    assert prompt_lookup(context, 2) == [7, 8]  # "2 3" last seen before "7 8"
    assert prompt_lookup([5, 6, 7, 1, 6, 7], 3, ngram_max=3, ngram_min=2) == [1, 6, 7]
    assert prompt_lookup([1, 2, 3, 4], 3) == []
    assert prompt_lookup(context, 0) == []


def test_policy_prefers_lookup_and_falls_back_to_mtp() -> None:
    context = [1, 2, 3, 4, 1, 2]
    assert DraftPolicy("mtp+lookup", 2)(context, [9, 9, 9], 4) == [3, 4]
    assert DraftPolicy("mtp+lookup", 2)([1, 2, 3], [9, 8, 7], 4) == [9, 8]
    assert DraftPolicy("lookup", 3)([1, 2, 3], [9, 8], 4) == []
    assert DraftPolicy("mtp", 3)(context, [9, 8, 7, 6], 2) == [9, 8]
    assert DraftPolicy("off", 3)(context, [9], 3) == []
    with pytest.raises(ValueError, match="speculation mode"):
        DraftPolicy("always", 2)


def test_policy_says_when_it_may_propose() -> None:
    """`proposes` is False exactly where a call can return nothing: mode off, no drafts asked
    or allowed, MTP alone on a backend without the head."""
    context, mtp = [1, 2, 3, 9, 1, 2, 3], [7, 8]
    for mode in ("off", "mtp", "lookup", "mtp+lookup"):
        for n_draft, allowed, has_mtp in [(2, 2, True), (0, 2, True), (2, 0, True), (2, 2, False)]:
            policy = DraftPolicy(mode, allowed)
            proposed = policy(context, mtp if has_mtp else [], n_draft)
            assert policy.proposes(n_draft, has_mtp) == bool(proposed), (mode, n_draft, has_mtp)


def test_scripted_drafts_follow_a_known_sequence() -> None:
    scripted = ScriptedDrafts([[1, 2, 3, 4, 5, 6]], n_draft=2)
    assert scripted([1, 2, 3], [], 4) == [4, 5]
    assert scripted([1, 2, 9], [], 4) == []
    assert scripted.proposed == 2
