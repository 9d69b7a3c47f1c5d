"""The SQLite session store: WAL, append-only messages, summaries, project allow-list."""

from __future__ import annotations

import sqlite3

import pytest

from agent.sessions import SessionNotFound, SessionStore, db_path
from openjet import paths


def new(store: SessionStore, title: str = "t", workdir: str = "/w") -> str:
    return store.create(
        title=title,
        workdir=workdir,
        endpoint="http://127.0.0.1:1/v1",
        model="m",
        profile="local",
        approval="ask",
    ).id


def test_lives_in_the_data_dir_in_wal_mode() -> None:
    store = SessionStore()
    assert store.path == db_path() == paths.data_dir() / "sessions.db"
    (mode,) = sqlite3.connect(store.path).execute("PRAGMA journal_mode").fetchone()
    assert mode == "wal"


def test_session_fields_and_updates() -> None:
    store = SessionStore()
    sid = new(store)
    record = store.get(sid)
    assert (record.title, record.status, record.prompt_tokens, record.allow_prefixes) == (
        "t",
        "idle",
        0,
        [],
    )
    store.update(sid, status="running", allow_prefixes=["make"])
    store.add_tokens(sid, 100, 7)
    store.add_tokens(sid, 50, 3)
    record = store.get(sid)
    assert (record.status, record.allow_prefixes, record.prompt_tokens, record.completion_tokens) == (
        "running", ["make"], 150, 10,
    )  # fmt: skip
    assert record.updated >= record.created


def test_messages_are_numbered_in_order_and_survive_reopening() -> None:
    store = SessionStore()
    sid = new(store)
    seqs = [store.append_message(sid, {"role": "user", "content": str(i)}) for i in range(3)]
    assert seqs == [1, 2, 3]
    store.close()
    again = SessionStore()
    assert again.messages(sid) == [(i + 1, {"role": "user", "content": str(i)}) for i in range(3)]
    assert again.messages(sid, after_seq=2) == [(3, {"role": "user", "content": "2"})]


def test_list_search_delete() -> None:
    store = SessionStore()
    a = new(store, "fix the parser", "/src/a")
    b = new(store, "write docs", "/src/b")
    store.append_message(a, {"role": "user", "content": "x"})
    store.append_event(a, "usage", {"n": 1})
    assert {r.id for r in store.sessions()} == {a, b}
    assert [r.id for r in store.sessions("parser")] == [a]
    assert [r.id for r in store.sessions("/src/b")] == [b]
    store.delete(a)
    assert [r.id for r in store.sessions()] == [b]
    assert store.messages(a) == [] and store.events(a) == []
    with pytest.raises(SessionNotFound, match="no session with id"):
        store.get(a)
    with pytest.raises(SessionNotFound):
        store.delete(a)


def test_summaries_and_events() -> None:
    store = SessionStore()
    sid = new(store)
    assert store.latest_summary(sid) is None
    store.add_summary(sid, 4, "first")
    store.add_summary(sid, 9, "second")
    assert store.latest_summary(sid) == (9, "second")
    store.append_event(sid, "a", {"x": 1})
    store.append_event(sid, "b", {})
    assert store.events(sid) == [("a", {"x": 1}), ("b", {})]


def test_project_prefixes_are_per_workdir_and_unique() -> None:
    store = SessionStore()
    store.add_project_prefix("/p", "make")
    store.add_project_prefix("/p", "make")
    store.add_project_prefix("/q", "ls")
    assert store.project_prefixes("/p") == ["make"]
    assert store.project_prefixes("/q") == ["ls"]
