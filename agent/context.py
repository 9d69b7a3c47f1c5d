"""The context window: what each model request contains, its token budget, and condensing.

A request is always `[system prompt] + tools` (the stable prefix: the same bytes every request
of a session, so the engine's prefix cache keeps hitting) followed by the active conversation:
the latest summary, if any, then every stored message after the point it summarizes. When the
estimate nears the profile's context size, older messages are condensed into a new summary —
by the model, or deterministically when the model call fails — and stored, so the new prefix
stays stable until the next condensing.
"""

from __future__ import annotations

import asyncio
import json
from importlib import resources
from string import Template
from typing import Any

from agent.llm import LLMClient, LLMError
from agent.sessions import SessionStore

CONDENSE_AT = 0.75  # fraction of the context size that triggers condensing
CHARS_PER_TOKEN = 3.0  # conservative: real text averages ~3.5-4 chars a token
SUMMARY_PREFIX = "Summary of the earlier conversation (older turns were condensed):\n"
CONDENSE_TIMEOUT_S = 180.0
KEEP_TAIL_MESSAGES = 6


def load_prompt(name: str, **values: str) -> str:
    text = resources.files("agent.prompts").joinpath(f"{name}.md").read_text(encoding="utf-8")
    return Template(text).safe_substitute(values).strip()


def estimate_tokens(value: Any) -> int:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return int(len(text) / CHARS_PER_TOKEN) + 1


SENT_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")


def for_request(message: dict[str, Any], keep_reasoning: bool = False) -> dict[str, Any]:
    """A stored message as sent: our bookkeeping keys (cancellation marks) removed, and the
    reasoning unless `keep_reasoning`."""
    keys = (*SENT_KEYS, "reasoning_content") if keep_reasoning else SENT_KEYS
    return {k: v for k, v in message.items() if k in keys}


class ContextWindow:
    """The active conversation of one session and its budget."""

    def __init__(
        self,
        store: SessionStore,
        session_id: str,
        system_prompt: str,
        tools: list[dict[str, Any]],
        context_size: int,
        send_reasoning: bool = False,
        size_from_endpoint: bool = False,
    ) -> None:
        self.store = store
        # When the profile does not fix the context size, the endpoint's own is learnt once.
        self.size_from_endpoint = size_from_endpoint
        # Qwen templates render the reasoning of the current turn's assistant messages: sending
        # it back keeps the engine's cached prefix valid mid-turn. Some cloud APIs reject the
        # field, so only endpoints on this machine (our engine, llama-server) get it.
        self.send_reasoning = send_reasoning
        self.session_id = session_id
        self.system_prompt = system_prompt
        self.tools = tools
        self.context_size = context_size
        self._measured: tuple[int, int] | None = None  # (tokens the server counted, up to seq)

    def active(self) -> tuple[str | None, list[tuple[int, dict[str, Any]]]]:
        """(summary text or None, messages after the summary)."""
        summary = self.store.latest_summary(self.session_id)
        upto, text = summary if summary else (0, None)
        return text, self.store.messages(self.session_id, after_seq=upto)

    def request_messages(self) -> list[dict[str, Any]]:
        summary, messages = self.active()
        out: list[dict[str, Any]] = [{"role": "system", "content": self.system_prompt}]
        if summary:
            out.append({"role": "user", "content": SUMMARY_PREFIX + summary})
        users = [i for i, (_, m) in enumerate(messages) if m.get("role") == "user"]
        current = users[-1] if users else 0
        out += [
            for_request(m, self.send_reasoning and i > current) for i, (_, m) in enumerate(messages)
        ]
        return out

    def note_usage(self, prompt_tokens: int, completion_tokens: int) -> None:
        """Remember the server's count, valid for every message stored so far."""
        _, messages = self.active()
        last = messages[-1][0] if messages else 0
        if prompt_tokens:
            self._measured = (prompt_tokens + completion_tokens, last)

    def estimate(self) -> int:
        summary, messages = self.active()
        if self._measured and (not messages or messages[0][0] <= self._measured[1]):
            tokens, upto = self._measured
            return tokens + sum(estimate_tokens(m) for seq, m in messages if seq > upto)
        fixed = estimate_tokens(self.system_prompt) + estimate_tokens(self.tools)
        return fixed + estimate_tokens(summary or "") + sum(estimate_tokens(m) for _, m in messages)

    def over_budget(self) -> bool:
        return self.estimate() > CONDENSE_AT * self.context_size

    def _boundary(self, messages: list[tuple[int, dict[str, Any]]], everything: bool) -> int:
        """The last seq to condense: before the current user turn, never between a tool call
        and its result (a kept tail starts at a user or assistant message)."""
        if everything:
            return messages[-1][0] if messages else 0
        users = [i for i, (_, m) in enumerate(messages) if m.get("role") == "user"]
        cut = users[-1] if users else 0
        tail = messages[cut:]
        if cut == 0 or sum(estimate_tokens(m) for _, m in tail) > self.context_size * 0.4:
            cut = max(0, len(messages) - KEEP_TAIL_MESSAGES)
            while cut > 0 and messages[cut][1].get("role") == "tool":
                cut -= 1
        return messages[cut - 1][0] if cut > 0 else 0

    async def condense(self, llm: LLMClient, everything: bool = False) -> str:
        """Condense older messages into a stored summary; returns 'model', 'fallback' or 'nothing'."""
        summary, messages = self.active()
        upto = self._boundary(messages, everything)
        old = [m for seq, m in messages if seq <= upto]
        if not old:
            return "nothing"
        transcript = render_transcript(summary, old, max_chars=int(self.context_size * 1.5))
        how = "model"
        try:
            text = await asyncio.wait_for(self._summarize(llm, transcript), CONDENSE_TIMEOUT_S)
        except (TimeoutError, LLMError):
            text = ""
        if not text.strip():
            how, text = "fallback", fallback_summary(summary, old, max_chars=self.context_size)
        self.store.add_summary(self.session_id, upto, text.strip())
        self.store.append_event(self.session_id, "condensed", {"upto_seq": upto, "how": how})
        self._measured = None
        return how

    async def _summarize(self, llm: LLMClient, transcript: str) -> str:
        messages = [
            {"role": "system", "content": load_prompt("condense")},
            {"role": "user", "content": transcript},
        ]
        completion = await llm.stream_chat(messages, max_tokens=1024)
        return completion.content

    def clear(self) -> None:
        """Start the context afresh (the stored messages stay, for the record)."""
        summary, messages = self.active()
        if messages or summary:
            last = self.store.messages(self.session_id)[-1][0]
            self.store.add_summary(self.session_id, last, "")
        self._measured = None


def _describe(message: dict[str, Any], limit: int) -> list[str]:
    role = message.get("role", "?")
    lines = []
    content = str(message.get("content") or "").strip()
    if content:
        cut = content if len(content) <= limit else content[:limit] + " [...]"
        lines.append(f"{role}: {cut}")
    for call in message.get("tool_calls") or []:
        function = call.get("function", {})
        lines.append(
            f"assistant called {function.get('name')}({function.get('arguments', '')[:200]})"
        )
    return lines


def render_transcript(summary: str | None, messages: list[dict[str, Any]], max_chars: int) -> str:
    parts = [f"Earlier summary:\n{summary}"] if summary else []
    parts += [line for m in messages for line in _describe(m, 2000)]
    text = "\n\n".join(parts)
    return (
        text
        if len(text) <= max_chars
        else text[: max_chars // 3] + "\n[...]\n" + text[-2 * max_chars // 3 :]
    )


def fallback_summary(summary: str | None, messages: list[dict[str, Any]], max_chars: int) -> str:
    """A deterministic condensation: every request kept, everything else cut to its first line."""
    lines = [summary] if summary else []
    for message in messages:
        limit = 600 if message.get("role") == "user" else 160
        for line in _describe(message, limit):
            lines.append("- " + (line if message.get("role") == "user" else line.splitlines()[0]))
    text = "\n".join(lines)
    return text if len(text) <= max_chars else "[...]\n" + text[-max_chars:]
