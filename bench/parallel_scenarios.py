"""The measurements of bench/parallel.py: streaming HTTP clients for OpenJet's server and
llama-server, and the scenarios (concurrent agents, decoding beside a long prefill, follow-ups
on a cached conversation), each returning plain numbers.

Both engines are driven through `POST /v1/completions` with token-id prompts (exact lengths),
greedy, streamed with usage. Token ids of a reply (needed to build a follow-up conversation)
come from a non-streamed request with `return_tokens` (OpenJet: /v1/completions; llama-server:
its native /completion). Times are client-side `time.monotonic()` readings of SSE chunks; the
servers' own `timings.prompt_ms` bounds a prefill. Both servers are asked for
`timings_per_token`: a chunk for every token, text or not (the synthetic vocabulary's `[PAD]`
pieces are empty, and a random-weight model's greedy output runs into them), saying how many
tokens came so far. Per-agent decode rates come from each server's own timings
(`predicted_per_second`: tokens after the first over the time since the first).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class Sizes:
    """How big the run is: the device run (issue 5's sizes) or the CPU smoke run."""

    preset: str
    quant: str
    backend: str  # OpenJet's backend: cuda | cpu
    slots: int
    kv_tokens: int  # OpenJet's KV pool and llama-server's -c
    agents: list[int]
    context_agents: list[int]
    short: int  # prompt tokens of a "short prompt"
    gen: int  # tokens each agent generates
    context: int  # the long context per agent
    prefill: int  # the prompt processed beside a decoding agent
    reply: int  # tokens of a reply before a follow-up
    follow: int  # new tokens of a follow-up
    warm_s: float  # solo decoding measured before the long prefill starts

    @classmethod
    def device(cls) -> Sizes:
        """Issue 5's figures on the 27B shape. Eight agents at 23K do not fit the 131072-token
        KV budget both engines get (llama-server: 4 slots of 32768), so the long context runs
        with 4, 2 and 1 agents."""
        return cls(
            preset="27b", quant="q4_k_m", backend="cuda", slots=8, kv_tokens=131072,
            agents=[1, 2, 4, 8], context_agents=[4, 2, 1], short=64, gen=512,
            context=23000, prefill=20000, reply=32, follow=32, warm_s=2.0,
        )  # fmt: skip

    @classmethod
    def smoke(cls) -> Sizes:
        """The same path on the CPU in seconds: tiny model, short contexts, few tokens."""
        return cls(
            preset="tiny", quant="q4_k_m", backend="cpu", slots=4, kv_tokens=8192,
            agents=[1, 2, 4], context_agents=[2, 1], short=16, gen=16,
            context=600, prefill=500, reply=8, follow=8, warm_s=0.5,
        )  # fmt: skip


class Prompts:
    """Deterministic random token-id prompts of ordinary vocabulary, one per name."""

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def make(self, n: int, name: str) -> list[int]:
        import numpy as np

        rng = np.random.default_rng(zlib.crc32(name.encode()))
        return [int(t) for t in rng.integers(0, self.limit, n)]


@dataclass
class Stream:
    """One streamed completion as the client saw it: (arrival time, tokens so far) per chunk,
    the count from the chunk's `timings.predicted_n` (`timings_per_token`). `done` (the end of
    the stream) and the server's timings are exact too."""

    sent: float
    events: list[tuple[float, int]] = field(default_factory=list)
    done: float | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    @property
    def first(self) -> float | None:
        return self.events[0][0] if self.events else self.done

    @property
    def last(self) -> float | None:
        return self.events[-1][0] if self.events else None

    @property
    def tokens(self) -> int:
        counted = self.events[-1][1] if self.events else 0
        return int(self.usage.get("completion_tokens") or counted)

    def rate(self) -> float | None:
        """Decode tok/s from the first to the last token, as the client saw the chunks."""
        if len(self.events) < 2 or self.events[-1][0] <= self.events[0][0]:
            return None
        return (self.tokens - 1) / (self.events[-1][0] - self.events[0][0])

    def server_rate(self) -> float | None:
        """Decode tok/s by the server's own clock (first to last token); None if not sent."""
        value = self.timings.get("predicted_per_second")
        return float(value) if value else None

    def wall_rate(self) -> float | None:
        """Tokens over the time from sending the request to the end of the stream."""
        if self.done is None or self.done <= self.sent:
            return None
        return self.tokens / (self.done - self.sent)

    def _count_at(self, moment: float) -> int:
        count = 0
        for when, total in self.events:
            if when > moment:
                break
            count = total
        return count

    def tokens_between(self, start: float, end: float) -> float:
        """Tokens that arrived in (start, end]."""
        return float(self._count_at(end) - self._count_at(start))


@dataclass
class Engine:
    """Client side of one engine under test."""

    name: str  # openjet | llama-server
    base: str

    def fields(self, n_draft: int = 0, slot: int | None = None) -> dict[str, Any]:
        """Engine-specific request fields. OpenJet places a request by its cached prefix itself;
        llama-server is pinned to a slot (`id_slot`) where a test needs a context to stay put."""
        if self.name == "openjet":  # both generate exactly max_tokens (random weights may
            return {"n_draft": n_draft, "ignore_eos": True}  # draw an end token early)
        pinned = {} if slot is None else {"id_slot": slot}
        return {"ignore_eos": True, "cache_prompt": True, **pinned}

    async def stream(
        self,
        client: httpx.AsyncClient,
        prompt: list[int],
        max_tokens: int,
        n_draft: int = 0,
        record: Stream | None = None,
        slot: int | None = None,
    ) -> Stream:
        """Stream a completion; `record` (if given) fills as chunks arrive, for cancellation."""
        body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True}
        body |= {"stream_options": {"include_usage": True}, **self.fields(n_draft, slot)}
        body["timings_per_token"] = True  # a chunk per token, saying how many came so far
        rec = record or Stream(time.monotonic())
        rec.sent = time.monotonic()
        async with client.stream("POST", f"{self.base}/v1/completions", json=body) as response:
            if response.status_code != 200:
                rec.error = f"HTTP {response.status_code}: {(await response.aread())[:300]!r}"
                return rec
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue  # blank lines, ": queued" comments
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                self._chunk(rec, json.loads(data), time.monotonic())
        rec.done = time.monotonic()
        return rec

    @staticmethod
    def _chunk(rec: Stream, chunk: dict[str, Any], now: float) -> None:
        if "error" in chunk:
            rec.error = str(chunk["error"])[:300]
        rec.usage = chunk.get("usage") or rec.usage
        rec.timings = chunk.get("timings") or rec.timings
        choices = chunk.get("choices") or []
        if not choices:
            return
        before = rec.events[-1][1] if rec.events else 0
        produced = (chunk.get("timings") or {}).get("predicted_n", before)
        if produced > before:
            rec.events.append((now, int(produced)))
        elif choices[0].get("finish_reason") and not rec.events:
            rec.events.append((now, 0))  # ended without a token: marks the first response

    async def step_counters(self, client: httpx.AsyncClient) -> dict[str, float] | None:
        """OpenJet's steps and rows run so far (from /metrics); None for llama-server."""
        if self.name != "openjet":
            return None
        response = await client.get(f"{self.base}/metrics")
        response.raise_for_status()
        wanted = {"openjet_steps_total": "steps", "openjet_rows_total": "rows"}
        out: dict[str, float] = {}
        for line in response.text.splitlines():
            name, _, value = line.partition(" ")
            if name in wanted:
                out[wanted[name]] = float(value)
        return out

    async def reply_ids(
        self, client: httpx.AsyncClient, prompt: list[int], n: int, slot: int | None = None
    ) -> tuple[list[int], dict[str, Any]]:
        """A greedy reply's token ids (not streamed) and the server's timings."""
        if self.name == "openjet":
            body = {"prompt": prompt, "max_tokens": n, "temperature": 0, "return_tokens": True}
            response = await client.post(f"{self.base}/v1/completions", json=body | self.fields())
            response.raise_for_status()
            data = response.json()
            return [int(t) for t in data["choices"][0]["tokens"]], data.get("timings", {})
        body = {"prompt": prompt, "n_predict": n, "temperature": 0, "return_tokens": True}
        response = await client.post(f"{self.base}/completion", json=body | self.fields(0, slot))
        response.raise_for_status()
        data = response.json()
        return [int(t) for t in data["tokens"]], data.get("timings", {})


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def agents_summary(streams: list[Stream]) -> dict[str, Any]:
    """Per-agent and aggregate decode rates of concurrent streams."""
    errors = [s.error for s in streams if s.error]
    firsts = [s.first for s in streams if s.first is not None]
    lasts = [s.last for s in streams if s.last is not None]
    dones = [s.done for s in streams if s.done is not None]
    total = sum(s.tokens for s in streams)
    rates = [s.server_rate() or s.rate() for s in streams]
    out: dict[str, Any] = {
        "agents": len(streams),
        "tokens": [s.tokens for s in streams],
        "per_agent_tok_s": rates,
        "mean_per_agent_tok_s": _mean(rates),
        "client_per_agent_tok_s": [s.rate() for s in streams],
        "wall_per_agent_tok_s": [s.wall_rate() for s in streams],
        "ttft_s": [(s.first - s.sent) if s.first else None for s in streams],
        "server_prompt_s": [float(s.timings.get("prompt_ms") or 0) / 1e3 for s in streams],
        "errors": errors,
    }
    if dones and len(dones) == len(streams):  # request sent to the last stream's end: exact
        out["aggregate_tok_s"] = total / (max(dones) - min(s.sent for s in streams))
    start, end = max(firsts, default=0.0), min(lasts, default=0.0)
    if len(firsts) == len(streams) and end > start:  # every agent decoding at once
        out["steady_aggregate_tok_s"] = sum(s.tokens_between(start, end) for s in streams) / (
            end - start
        )
        out["steady_window_s"] = end - start
    details = [s.usage.get("completion_tokens_details") or {} for s in streams]
    out["drafts_accepted"] = [d.get("accepted_prediction_tokens") for d in details]
    out["drafts_rejected"] = [d.get("rejected_prediction_tokens") for d in details]
    return out


async def concurrent(
    engine: Engine,
    client: httpx.AsyncClient,
    prompts: list[list[int]],
    gen: int,
    n_draft: int,
    pinned: bool = False,
) -> dict[str, Any]:
    """Agent i streams prompts[i] (pinned: in llama-server's slot i), all at once."""
    streams = await asyncio.gather(
        *(
            engine.stream(client, p, gen, n_draft, slot=i if pinned else None)
            for i, p in enumerate(prompts)
        )
    )
    return agents_summary(list(streams))


async def short_agents(
    engine: Engine, client: httpx.AsyncClient, prompts: Prompts, sizes: Sizes, n: int, drafts: int
) -> dict[str, Any]:
    batch = [prompts.make(sizes.short, f"short-{n}-{drafts}-{i}") for i in range(n)]
    result = await concurrent(engine, client, batch, sizes.gen, drafts)
    result["speculation"] = speculation_note(engine, drafts)
    return result


def speculation_note(engine: Engine, drafts: int) -> str:
    if engine.name != "openjet":
        return "none (llama-server without a draft model)"
    if drafts == 0:
        return "off: no drafts (acceptance rate not applicable)"
    return f"forced: {drafts} drafts per step, 100% acceptance assumed ({drafts + 1} tokens/step)"


async def follow_up(
    engine: Engine, client: httpx.AsyncClient, conversation: list[int], prompts: Prompts,
    sizes: Sizes, name: str, slot: int | None = None,
) -> dict[str, Any]:  # fmt: skip
    """First-token latency of a follow-up on a cached conversation (its reply's ids included)."""
    request = conversation + prompts.make(sizes.follow, name)
    stream = await engine.stream(client, request, 4, slot=slot)
    ttft = (stream.first - stream.sent) if stream.first else None
    details = stream.usage.get("prompt_tokens_details") or {}
    return {
        "context_tokens": len(request),
        "ttft_s": ttft,
        "prompt_processed": stream.timings.get("prompt_n"),
        "cached_tokens": details.get("cached_tokens"),
        "error": stream.error,
    }


async def interference(
    engine: Engine, client: httpx.AsyncClient, prompts: Prompts, sizes: Sizes
) -> dict[str, Any]:
    """Agent A decodes; agent B's long prompt arrives: A's tok/s before and during B's prefill.
    Then a follow-up on B's cached conversation."""
    a = Stream(time.monotonic())
    a_task = asyncio.create_task(
        engine.stream(client, prompts.make(sizes.short, "interference-a"), 100_000, 0, a)
    )
    while not a.events and not a_task.done():  # A is admitted and decoding
        await asyncio.sleep(0.05)
    await asyncio.sleep(sizes.warm_s)
    b_prompt = prompts.make(sizes.prefill, "interference-b")
    before = await engine.step_counters(client)
    b_sent = time.monotonic()
    b_ids, b_timings = await engine.reply_ids(client, b_prompt, sizes.reply)
    b_done = time.monotonic()
    after = await engine.step_counters(client)
    prompt_s = float(b_timings.get("prompt_ms") or 0) / 1e3
    window_end = b_sent + prompt_s if prompt_s > 0 else b_done
    await asyncio.sleep(0.2)
    a_task.cancel()
    with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
        await a_task  # cancelled on purpose: the server sees the disconnect
    if a.error or not a.events:
        raise RuntimeError(f"agent A produced no tokens: {a.error}")
    solo_start = max(a.events[0][0], b_sent - sizes.warm_s)
    solo = a.tokens_between(solo_start, b_sent) / max(b_sent - solo_start, 1e-6)
    # A's rate over the part of B's prefill that A was still generating in (a reply that
    # ended early would count the rest as zero tokens)
    a_end = min(window_end, a.done) if a.done is not None else window_end
    during = a.tokens_between(b_sent, a_end) / max(a_end - b_sent, 1e-6)
    result: dict[str, Any] = {
        "a_solo_tok_s": solo,
        "a_during_prefill_tok_s": during,
        "kept_fraction": during / solo if solo else None,
        "b_prompt_tokens": sizes.prefill,
        "b_prefill_s": window_end - b_sent,
        "b_prefill_tok_s": sizes.prefill / (window_end - b_sent),
        "b_timings": b_timings,
        "a_ended_during_b": a_end < window_end,
    }
    if before is not None and after is not None:
        # steps with A's row in them: A gains one token a step, so fewer A tokens than steps
        # means steps that ran B's chunk without A's row
        steps = after["steps"] - before["steps"]
        result["engine_steps_during_b"] = steps
        result["engine_rows_during_b"] = after["rows"] - before["rows"]
        result["a_tokens_during_b"] = a.tokens_between(b_sent, b_done)
        result["b_request_s"] = b_done - b_sent
    conversation = b_prompt + b_ids
    result["follow_up"] = await follow_up(engine, client, conversation, prompts, sizes, "fu-20k")
    return result


async def long_context(
    engine: Engine, client: httpx.AsyncClient, prompts: Prompts, sizes: Sizes
) -> dict[str, Any]:
    """Agents with a long context each: contexts primed first (untimed: one after the other,
    so OpenJet reuses the shared head; llama-server keeps agent i in slot i), then each agent
    count (largest first) decodes from its cached context plus a few new tokens, all agents at
    once; then a follow-up on agent 0's conversation."""
    n_max = max(sizes.context_agents)
    # a shared head (system prompt, tools, files every agent read) and a distinct tail each:
    # the priming then costs less, while decoding still reads every agent's whole context
    tail = min(1024, sizes.context // 4)
    head = prompts.make(sizes.context - tail, "context-head")
    contexts = [head + prompts.make(tail, f"context-{i}") for i in range(n_max)]
    started = time.monotonic()
    for i, context in enumerate(contexts):
        await engine.reply_ids(client, context, 1, slot=i)
    result: dict[str, Any] = {
        "context_tokens": sizes.context,
        "prime_s": time.monotonic() - started,
        "prime_tok_s": n_max * sizes.context / (time.monotonic() - started),
    }
    for n in sorted(sizes.context_agents, reverse=True):
        batch = [c + prompts.make(16, f"context-new-{n}-{i}") for i, c in enumerate(contexts[:n])]
        result[f"agents_{n}"] = await concurrent(engine, client, batch, sizes.gen, 0, True)
    opening = contexts[0] + prompts.make(16, "context-follow")
    ids, _ = await engine.reply_ids(client, opening, sizes.reply, slot=0)
    conversation = opening + ids
    result["follow_up"] = await follow_up(engine, client, conversation, prompts, sizes, "fu", 0)
    return result


async def warm_up(
    engine: Engine, client: httpx.AsyncClient, prompts: Prompts, sizes: Sizes
) -> dict[str, Any]:
    """Untimed first requests at each agent count, so that one-time costs (kernel builds, CUDA
    graph captures of each batch layout) fall outside the measurements."""
    started = time.monotonic()
    for n in sorted({1, *sizes.agents}):
        batch = [prompts.make(sizes.short, f"warm-{n}-{i}") for i in range(n)]
        await concurrent(engine, client, batch, 8, 0)
    return {"seconds": time.monotonic() - started}


async def run_task(
    task: str, engine: Engine, client: httpx.AsyncClient, prompts: Prompts, args: Any
) -> dict[str, Any]:
    """One named task ("short:N", "forced:N", "interference", "context") on one engine."""
    sizes: Sizes = args.sizes
    kind, _, count = task.partition(":")
    if kind == "short":
        return await short_agents(engine, client, prompts, sizes, int(count), 0)
    if kind == "forced":
        return await short_agents(engine, client, prompts, sizes, int(count), args.forced_drafts)
    if kind == "interference":
        return await interference(engine, client, prompts, sizes)
    if kind == "context":
        return await long_context(engine, client, prompts, sizes)
    raise ValueError(f"unknown task {task!r}")
