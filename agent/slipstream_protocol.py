"""Slipstream's wire protocol with the orchestrator: the JSON replies it must give, validated.

The orchestrator answers every request with one JSON object (a fenced ```json block or bare
JSON inside prose is accepted too). Three shapes:

    plan:   {"steps": [{"title": str, "instructions": str, "acceptance": [str, ...]}, ...]}
    review: {"verdict": "accept" | "revise" | "replan", "feedback": str, "steps": [...]}
            (`steps` only with "replan": they replace every step not yet accepted)
    final:  {"verdict": "done" | "incomplete", "summary": str, "steps": [...]}
            (`steps` optional with "incomplete": more work to run before a new final review)

Anything else raises `ProtocolError` whose message says what is wrong in words the
orchestrator can act on (it is sent back once as a correction).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

MAX_STEPS = 12
MAX_TEXT_CHARS = 8000
ReplyKind = Literal["plan", "review", "final"]
REVIEW_VERDICTS = ("accept", "revise", "replan")
FINAL_VERDICTS = ("done", "incomplete")
_FENCE = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.DOTALL)


class ProtocolError(ValueError):
    """The orchestrator's reply is not what the protocol asks for."""


@dataclass(frozen=True)
class PlanStep:
    title: str
    instructions: str
    acceptance: tuple[str, ...]

    def as_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "instructions": self.instructions,
            "acceptance": list(self.acceptance),
        }


@dataclass(frozen=True)
class Review:
    verdict: str  # accept | revise | replan
    feedback: str
    steps: tuple[PlanStep, ...] = ()


@dataclass(frozen=True)
class FinalVerdict:
    verdict: str  # done | incomplete
    summary: str
    steps: tuple[PlanStep, ...] = ()


def extract_object(text: str) -> dict[str, Any]:
    """The JSON object in a reply: the whole text, a fenced block, or the outermost braces."""
    candidates = [text.strip()]
    candidates += [m.group(1) for m in _FENCE.finditer(text)]
    if "{" in text and "}" in text:
        candidates.append(text[text.index("{") : text.rindex("}") + 1])
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    preview = " ".join(text.split())[:120]
    raise ProtocolError(f"the reply is not a JSON object (it starts: {preview!r})")


def _text(value: Any, where: str, required: bool = True) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise ProtocolError(f"{where} must be a non-empty string")
    return value.strip()[:MAX_TEXT_CHARS]


def parse_steps(value: Any, where: str = "steps") -> tuple[PlanStep, ...]:
    if not isinstance(value, list) or not value:
        raise ProtocolError(f"{where} must be a non-empty list of step objects")
    if len(value) > MAX_STEPS:
        raise ProtocolError(f"{where} has {len(value)} steps; at most {MAX_STEPS} are allowed")
    steps = []
    for i, raw in enumerate(value, 1):
        if not isinstance(raw, dict):
            raise ProtocolError(
                f"{where}[{i}] must be an object with title, instructions, acceptance"
            )
        acceptance = raw.get("acceptance")
        if isinstance(acceptance, str):
            acceptance = [acceptance]
        if not isinstance(acceptance, list) or not acceptance:
            raise ProtocolError(f"{where}[{i}].acceptance must be a non-empty list of checks")
        steps.append(
            PlanStep(
                title=_text(raw.get("title"), f"{where}[{i}].title"),
                instructions=_text(raw.get("instructions"), f"{where}[{i}].instructions"),
                acceptance=tuple(
                    _text(check, f"{where}[{i}].acceptance[{j}]")
                    for j, check in enumerate(acceptance, 1)
                ),
            )
        )
    return tuple(steps)


def _verdict(data: dict[str, Any], allowed: tuple[str, ...]) -> str:
    verdict = data.get("verdict")
    if verdict not in allowed:
        raise ProtocolError(f"verdict must be one of {', '.join(allowed)} (got {verdict!r})")
    return str(verdict)


def parse_plan(text: str) -> tuple[PlanStep, ...]:
    return parse_steps(extract_object(text).get("steps"))


def parse_review(text: str) -> Review:
    data = extract_object(text)
    verdict = _verdict(data, REVIEW_VERDICTS)
    feedback = _text(data.get("feedback"), "feedback", required=verdict == "revise")
    steps = parse_steps(data.get("steps")) if verdict == "replan" else ()
    return Review(verdict, feedback, steps)


def parse_final(text: str) -> FinalVerdict:
    data = extract_object(text)
    verdict = _verdict(data, FINAL_VERDICTS)
    summary = _text(data.get("summary"), "summary")
    steps: tuple[PlanStep, ...] = ()
    if verdict == "incomplete" and data.get("steps"):
        steps = parse_steps(data.get("steps"))
    return FinalVerdict(verdict, summary, steps)


def steps_from_json(value: list[dict[str, Any]]) -> tuple[PlanStep, ...]:
    """Steps as stored in the session's events (already validated once)."""
    return parse_steps(value)
