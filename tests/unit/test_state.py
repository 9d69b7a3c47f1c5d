"""The paged KV pool (sharing, copy-on-write, exhaustion), the prefix index, checkpoint cuts."""

from __future__ import annotations

import pytest

from engine.state import (
    CopyOp,
    Owner,
    PagedKVPool,
    PoolExhausted,
    PrefixIndex,
    checkpoint_lengths,
    common_prefix_length,
)


def test_pages_are_allocated_and_returned() -> None:
    pool = PagedKVPool(64, page_size=16)
    assert pool.extend(0, 20) == []
    assert pool.pages(0) == [0, 1] and pool.free_pages == 2
    pool.extend(1, 16)
    assert pool.pages(1) == [2]
    pool.truncate(0, 10)
    assert pool.pages(0) == [0] and pool.free_pages == 2
    pool.release(0)
    pool.release(1)
    assert pool.free_pages == 4 and pool.used_tokens == 0


def test_exhaustion_raises_and_changes_nothing() -> None:
    pool = PagedKVPool(32, page_size=16)
    pool.extend(0, 20)
    with pytest.raises(PoolExhausted, match="exhausted"):
        pool.extend(1, 17)
    assert pool.length(1) == 0 and pool.free_pages == 0 and pool.length(0) == 20


def test_checkpoint_shares_pages_and_writer_appends_without_copy() -> None:
    pool = PagedKVPool(128, page_size=16)
    pool.extend(0, 20)
    pool.share(0, "ckpt")
    assert pool.pages("ckpt") == pool.pages(0)
    assert pool.pages_needed(0, 30) == 0  # the writer may append after the sealed offset
    assert pool.extend(0, 30) == []
    assert pool.exclusive_pages("ckpt") == 0


def test_restored_copies_diverge_by_copy_on_write() -> None:
    pool = PagedKVPool(128, page_size=16)
    pool.extend(0, 20)
    pool.share(0, "ckpt")
    pool.extend(0, 25)
    pool.share("ckpt", 1)  # another slot restores the checkpoint
    copies = pool.extend(1, 22)
    assert copies == [CopyOp(src=pool.pages(0)[1], dst=pool.pages(1)[1], n_tokens=4)]
    assert pool.pages(1)[0] == pool.pages(0)[0]  # the full first page stays shared
    # the writer rolls back below the sealed offset: it must copy before writing there
    pool.truncate(0, 18)
    assert pool.pages_needed(0, 19) == 1
    assert pool.extend(0, 19)[0].n_tokens == 2


def test_release_frees_only_unshared_pages() -> None:
    pool = PagedKVPool(64, page_size=16)
    pool.extend(0, 32)
    pool.share(0, "ckpt")
    pool.release(0)
    assert pool.free_pages == 2
    pool.release("ckpt")
    assert pool.free_pages == 4


def test_revision_moves_exactly_when_a_page_list_changes() -> None:
    """CudaBackend re-uploads a slot's page list only when its revision moved: every change of
    the list must move it; a write inside the last page need not."""
    pool = PagedKVPool(256, page_size=16)
    seen: dict[Owner, int] = {0: pool.revision(0)}

    def moved(owner: Owner = 0) -> bool:
        now = pool.revision(owner)
        changed = now != seen.get(owner)
        seen[owner] = now
        return changed

    steps: list[tuple[str, bool]] = []
    pool.extend(0, 10)
    steps.append(("first page", moved()))
    pool.extend(0, 16)
    steps.append(("same page", moved()))
    pool.extend(0, 17)
    steps.append(("second page", moved()))
    pool.truncate(0, 17)
    steps.append(("truncate to the same length", moved()))
    pool.share(0, "ckpt")
    pool.truncate(0, 15)
    steps.append(("truncate drops a page", moved()))
    pool.extend(0, 20)  # a new second page
    steps.append(("page again", moved()))
    before = pool.pages(1)
    pool.share("ckpt", 1)  # slot 1 restores the checkpoint (17 rows: 1 row into page 2)
    steps.append(("restore into slot 1", moved(1) and pool.pages(1) != before))
    assert pool.extend(1, 18) != []  # the shared second page is copied before the write
    steps.append(("copy on write", moved(1)))
    pool.release(1)
    steps.append(("release", moved(1)))
    assert steps == [
        ("first page", True),
        ("same page", False),
        ("second page", True),
        ("truncate to the same length", False),
        ("truncate drops a page", True),
        ("page again", True),
        ("restore into slot 1", True),
        ("copy on write", True),
        ("release", True),
    ]


def test_prefix_index_finds_the_longest_usable_checkpoint() -> None:
    index = PrefixIndex()
    index.add(1, [1, 2, 3], now=1.0)
    index.add(2, [1, 2, 3, 4, 5], now=2.0)
    index.add(3, [1, 9], now=3.0)
    saved = index.longest([1, 2, 3, 4, 5, 6], max_length=5)
    assert saved is not None and saved.checkpoint == 2
    saved = index.longest([1, 2, 3, 4, 5], max_length=4)
    assert saved is not None and saved.checkpoint == 1
    assert index.longest([7], 10) is None
    assert index.holds([1, 9]) and not index.holds([1])
    assert [s.checkpoint for s in index.least_recently_used()] == [1, 2, 3]
    assert common_prefix_length([1, 2, 3], [1, 2, 4, 5]) == 2


def test_checkpoint_lengths_cut_at_intervals_boundaries_and_before_the_end() -> None:
    prompt = [7] * 300
    prompt[100] = 1  # a message start
    prompt[130] = 1  # too close to the previous cut
    cuts = checkpoint_lengths(prompt, 0, interval=128, boundary_tokens=frozenset({1}), min_gap=64)
    assert cuts == [100, 128, 256, 299]
    assert checkpoint_lengths(prompt, 200, 128, frozenset({1}), 64) == [256, 299]
