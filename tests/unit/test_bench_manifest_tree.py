"""bench/common.py's `worktree_tree`: the run manifest's id of the files measured, which maps a
device run back to the commit whose files it ran whatever HEAD the checkout names."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench.common import is_checkout, manifest, worktree_tree


def _git(repo: Path, *args: str) -> str:
    cmd = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "a.txt").write_text("one\n")
    (repo / ".gitignore").write_text("ignored/\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "first")
    return repo


def test_a_clean_checkout_gives_its_commits_tree(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    assert worktree_tree(repo) == _git(repo, "rev-parse", "HEAD^{tree}")


def test_changed_and_new_files_give_the_tree_of_the_commit_that_holds_them(tmp_path: Path) -> None:
    """A changed file and a new untracked one count, an ignored one and `_main/`, `_tree_*/` do not;
    committing those files gives a commit with exactly that tree; the checkout's own index is
    untouched."""
    repo = _repo(tmp_path)
    (repo / "a.txt").write_text("two\n")
    (repo / "b.txt").write_text("new\n")
    for other in ("ignored", "_main", "_tree_x"):  # ignored; gpu_check.sh's copies
        (repo / other).mkdir()
        (repo / other / "c.txt").write_text("not measured\n")
    before = _git(repo, "status", "--porcelain")
    tree = worktree_tree(repo)
    assert tree != _git(repo, "rev-parse", "HEAD^{tree}")
    assert _git(repo, "status", "--porcelain") == before  # nothing staged by it
    _git(repo, "add", "-A", "--", ".", ":(exclude)_main", ":(exclude)_tree_*")
    _git(repo, "commit", "-q", "-m", "second")
    assert tree == _git(repo, "rev-parse", "HEAD^{tree}")


def test_a_copy_of_another_commit_inside_the_checkout_gives_that_commits_tree(
    tmp_path: Path,
) -> None:
    """gpu_check.sh's compare modes time `git archive` copies of other commits in `_main/` and
    `_tree_*/` inside the checkout: such a copy is named by its own files' tree, not by the
    enclosing checkout's HEAD or files, and is not a checkout itself."""
    repo = _repo(tmp_path)
    first = _git(repo, "rev-parse", "HEAD")
    (repo / "a.txt").write_text("two\n")
    _git(repo, "commit", "-q", "-am", "second")
    copy = repo / "_tree_first"
    copy.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", first], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(copy)], input=archive, check=True)
    assert worktree_tree(copy) == _git(repo, "rev-parse", f"{first}^{{tree}}")
    assert worktree_tree(repo) == _git(repo, "rev-parse", "HEAD^{tree}")
    assert is_checkout(repo) and not is_checkout(copy)


def test_outside_git_there_is_no_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))  # no repository above
    assert worktree_tree(tmp_path) == ""


def test_the_manifest_names_the_tree() -> None:
    assert manifest()["tree"]
