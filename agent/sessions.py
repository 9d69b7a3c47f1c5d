"""The session store: SQLite in WAL mode at <data dir>/sessions.db.

Tables: `sessions` (one row per agent session, updated in place), `messages` (append-only: the
OpenAI-shaped conversation, numbered by `seq` per session), `events` (append-only log of what
happened: approvals, tool results, errors, usage), `summaries` (condensed context: the active
conversation is the latest summary plus the messages after its `upto_seq`) and `project_allow`
(command prefixes allowed for every agent in a workspace). Each append is its own committed
transaction, so a process killed at any instant leaves every message either fully stored or
absent — never half, never twice.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openjet import paths

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY, title TEXT NOT NULL, workdir TEXT NOT NULL, endpoint TEXT NOT NULL,
    model TEXT NOT NULL, profile TEXT NOT NULL, approval TEXT NOT NULL, status TEXT NOT NULL,
    created REAL NOT NULL, updated REAL NOT NULL,
    prompt_tokens INTEGER NOT NULL DEFAULT 0, completion_tokens INTEGER NOT NULL DEFAULT 0,
    allow_prefixes TEXT NOT NULL DEFAULT '[]');
CREATE TABLE IF NOT EXISTS messages (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE, seq INTEGER NOT NULL,
    message TEXT NOT NULL, created REAL NOT NULL, PRIMARY KEY (session_id, seq));
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    kind TEXT NOT NULL, data TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS summaries (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    upto_seq INTEGER NOT NULL, text TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS project_allow (
    workdir TEXT NOT NULL, prefix TEXT NOT NULL, created REAL NOT NULL,
    PRIMARY KEY (workdir, prefix));
CREATE INDEX IF NOT EXISTS events_by_session ON events(session_id, id);
"""
SESSION_FIELDS = (
    "id", "title", "workdir", "endpoint", "model", "profile", "approval", "status",
    "created", "updated", "prompt_tokens", "completion_tokens", "allow_prefixes",
)  # fmt: skip


class SessionNotFound(KeyError):
    def __str__(self) -> str:
        return f"no session with id {self.args[0]!r} (openjet sessions list shows them)"


@dataclass
class SessionRecord:
    id: str
    title: str
    workdir: str
    endpoint: str
    model: str
    profile: str
    approval: str
    status: str
    created: float
    updated: float
    prompt_tokens: int
    completion_tokens: int
    allow_prefixes: list[str]


def db_path() -> Path:
    return paths.data_dir() / "sessions.db"


class SessionStore:
    """All sessions of this machine. Safe to share between the agents of one process."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or db_path()
        paths.ensure_dir(self.path.parent)
        self._lock = threading.RLock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=10000")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _run(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def create(self, **fields: Any) -> SessionRecord:
        now = time.time()
        row = {
            "id": uuid.uuid4().hex[:12],
            "status": "idle",
            "created": now,
            "updated": now,
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "allow_prefixes": [],
            **fields,
        }
        values = tuple(
            json.dumps(row[f]) if f == "allow_prefixes" else row[f] for f in SESSION_FIELDS
        )
        marks = ", ".join("?" for _ in SESSION_FIELDS)
        self._run(f"INSERT INTO sessions ({', '.join(SESSION_FIELDS)}) VALUES ({marks})", values)
        return self.get(row["id"])

    def get(self, session_id: str) -> SessionRecord:
        rows = self._run(
            f"SELECT {', '.join(SESSION_FIELDS)} FROM sessions WHERE id = ?", (session_id,)
        )
        if not rows:
            raise SessionNotFound(session_id)
        return _record(rows[0])

    def update(self, session_id: str, **fields: Any) -> None:
        fields["updated"] = time.time()
        if "allow_prefixes" in fields:
            fields["allow_prefixes"] = json.dumps(fields["allow_prefixes"])
        assignments = ", ".join(f"{name} = ?" for name in fields)
        self._run(f"UPDATE sessions SET {assignments} WHERE id = ?", (*fields.values(), session_id))

    def add_tokens(self, session_id: str, prompt: int, completion: int) -> None:
        self._run(
            "UPDATE sessions SET prompt_tokens = prompt_tokens + ?, "
            "completion_tokens = completion_tokens + ?, updated = ? WHERE id = ?",
            (prompt, completion, time.time(), session_id),
        )

    def sessions(self, query: str | None = None) -> list[SessionRecord]:
        sql = f"SELECT {', '.join(SESSION_FIELDS)} FROM sessions"
        args: tuple[Any, ...] = ()
        if query:
            sql += " WHERE title LIKE ? OR workdir LIKE ? OR id LIKE ?"
            args = (f"%{query}%",) * 3
        return [_record(row) for row in self._run(sql + " ORDER BY updated DESC", args)]

    def delete(self, session_id: str) -> None:
        self.get(session_id)
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            for table in ("messages", "events", "summaries"):
                self._db.execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,))
            self._db.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
            self._db.execute("COMMIT")

    def append_message(self, session_id: str, message: dict[str, Any]) -> int:
        """Store one message at the end of the session; returns its seq."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                (last,) = self._db.execute(
                    "SELECT COALESCE(MAX(seq), 0) FROM messages WHERE session_id = ?",
                    (session_id,),
                ).fetchone()
                self._db.execute(
                    "INSERT INTO messages VALUES (?, ?, ?, ?)",
                    (session_id, last + 1, json.dumps(message), time.time()),
                )
                self._db.execute(
                    "UPDATE sessions SET updated = ? WHERE id = ?", (time.time(), session_id)
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return int(last) + 1

    def messages(self, session_id: str, after_seq: int = 0) -> list[tuple[int, dict[str, Any]]]:
        rows = self._run(
            "SELECT seq, message FROM messages WHERE session_id = ? AND seq > ? ORDER BY seq",
            (session_id, after_seq),
        )
        return [(int(seq), json.loads(text)) for seq, text in rows]

    def append_event(self, session_id: str, kind: str, data: dict[str, Any]) -> None:
        self._run(
            "INSERT INTO events (session_id, kind, data, created) VALUES (?, ?, ?, ?)",
            (session_id, kind, json.dumps(data), time.time()),
        )

    def events(self, session_id: str) -> list[tuple[str, dict[str, Any]]]:
        rows = self._run(
            "SELECT kind, data FROM events WHERE session_id = ? ORDER BY id", (session_id,)
        )
        return [(kind, json.loads(data)) for kind, data in rows]

    def add_summary(self, session_id: str, upto_seq: int, text: str) -> None:
        self._run(
            "INSERT INTO summaries VALUES (?, ?, ?, ?)", (session_id, upto_seq, text, time.time())
        )

    def latest_summary(self, session_id: str) -> tuple[int, str] | None:
        rows = self._run(
            "SELECT upto_seq, text FROM summaries WHERE session_id = ? ORDER BY rowid DESC LIMIT 1",
            (session_id,),
        )
        return (int(rows[0][0]), str(rows[0][1])) if rows else None

    def project_prefixes(self, workdir: str) -> list[str]:
        rows = self._run(
            "SELECT prefix FROM project_allow WHERE workdir = ? ORDER BY created", (workdir,)
        )
        return [str(row[0]) for row in rows]

    def add_project_prefix(self, workdir: str, prefix: str) -> None:
        self._run(
            "INSERT OR IGNORE INTO project_allow VALUES (?, ?, ?)", (workdir, prefix, time.time())
        )


def _record(row: tuple[Any, ...]) -> SessionRecord:
    values = dict(zip(SESSION_FIELDS, row, strict=True))
    values["allow_prefixes"] = json.loads(values["allow_prefixes"])
    return SessionRecord(**values)
