"""The orchestrator's JSON replies: what is accepted, and the clear errors for what is not."""

from __future__ import annotations

import json

import pytest

from agent.slipstream_cloud import CloudError, reply_from_body, retry_after_seconds
from agent.slipstream_protocol import ProtocolError, parse_final, parse_plan, parse_review

STEP = {"title": "Do it", "instructions": "Edit a.py", "acceptance": ["tests pass"]}


def test_plan_bare_fenced_and_in_prose() -> None:
    bare = json.dumps({"steps": [STEP]})
    for text in (bare, f"```json\n{bare}\n```", f"Here you go:\n{bare}\nGood luck."):
        (step,) = parse_plan(text)
        assert (step.title, step.instructions, step.acceptance) == (
            "Do it",
            "Edit a.py",
            ("tests pass",),
        )


def test_a_single_acceptance_string_becomes_a_list() -> None:
    (step,) = parse_plan(json.dumps({"steps": [{**STEP, "acceptance": "it runs"}]}))
    assert step.acceptance == ("it runs",)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("I will plan later.", "not a JSON object"),
        ("[1, 2]", "not a JSON object"),
        ('{"plan": []}', "steps must be a non-empty list"),
        ('{"steps": ["x"]}', r"steps\[1\] must be an object"),
        (json.dumps({"steps": [{**STEP, "acceptance": []}]}), r"steps\[1\].acceptance"),
        (json.dumps({"steps": [{**STEP, "title": " "}]}), r"steps\[1\].title must be a non-empty"),
        (json.dumps({"steps": [STEP] * 13}), "at most 12"),
    ],
)
def test_bad_plans_say_what_is_wrong(text: str, problem: str) -> None:
    with pytest.raises(ProtocolError, match=problem):
        parse_plan(text)


def test_reviews() -> None:
    assert parse_review('{"verdict": "accept"}').verdict == "accept"
    revise = parse_review('{"verdict": "revise", "feedback": "rename x"}')
    assert (revise.verdict, revise.feedback, revise.steps) == ("revise", "rename x", ())
    replan = parse_review(json.dumps({"verdict": "replan", "feedback": "no", "steps": [STEP]}))
    assert [s.title for s in replan.steps] == ["Do it"]
    with pytest.raises(ProtocolError, match="verdict must be one of accept, revise, replan"):
        parse_review('{"verdict": "ok"}')
    with pytest.raises(ProtocolError, match="feedback must be"):
        parse_review('{"verdict": "revise"}')
    with pytest.raises(ProtocolError, match="steps must be"):
        parse_review('{"verdict": "replan", "feedback": "x"}')


def test_final_reviews() -> None:
    done = parse_final('{"verdict": "done", "summary": "all good"}')
    assert (done.verdict, done.summary, done.steps) == ("done", "all good", ())
    more = parse_final(json.dumps({"verdict": "incomplete", "summary": "tests", "steps": [STEP]}))
    assert len(more.steps) == 1
    with pytest.raises(ProtocolError, match="summary"):
        parse_final('{"verdict": "done"}')


def test_retry_after_forms() -> None:
    assert retry_after_seconds("7") == 7.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:30 GMT", now=1445412500.0) == 10.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412500.0) == 0.0
    assert retry_after_seconds(None) is None and retry_after_seconds("soon") is None


def test_usage_is_used_else_estimated() -> None:
    messages = [{"role": "user", "content": "x" * 300}]
    body = {
        "choices": [{"message": {"content": "ok"}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2},
    }
    reply = reply_from_body(body, messages)
    assert (reply.prompt_tokens, reply.completion_tokens, reply.estimated) == (5, 2, False)
    reply = reply_from_body({"choices": [{"message": {"content": "y" * 30}}]}, messages)
    assert reply.estimated and reply.prompt_tokens > 100 and reply.completion_tokens == 11
    with pytest.raises(CloudError, match="no choices"):
        reply_from_body({"error": "x"}, messages)
