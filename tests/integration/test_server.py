"""The engine's HTTP API for real: uvicorn on loopback, the numpy reference backend, a synthetic
tiny qwen35 GGUF. Concurrency, chunking, speculation and prefix reuse must not change a single
token; every bad request gets its OpenAI error object; a disconnecting client frees its slot.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine.reference_backend import ReferenceBackend
from engine.scheduler import SchedulerConfig
from engine.server import create_app
from engine.server_launch import LaunchOptions, served_model, serving_in_thread
from engine.synthetic import write_synthetic
from tests.conftest import REAL_CACHE_DIR


def tiny_model_path() -> Path:
    """The tiny f32 synthetic model, written once per machine (atomically: tests run in parallel)."""
    path = REAL_CACHE_DIR / "test-models" / "serve-tiny-f32-seed3.gguf"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.part")
        write_synthetic(partial, "tiny", "f32", 3)
        os.replace(partial, path)
    return path


@pytest.fixture(scope="module")
def backend() -> ReferenceBackend:
    return ReferenceBackend.from_gguf(tiny_model_path(), n_slots=4, kv_tokens=2048)


@contextmanager
def serving(backend: ReferenceBackend, **config: Any) -> Iterator[str]:
    """Serve `backend` with a fresh scheduler on a free loopback port; yields the base URL."""
    options = LaunchOptions(
        model=tiny_model_path(), backend="cpu", scheduler=SchedulerConfig(**config)
    )
    with serving_in_thread(create_app(served_model(backend, options))) as base:
        yield base


PROMPTS = [
    "def add(a, b):\n    return",
    "The quick brown fox",
    "<|im_start|>user\nList three colours.<|im_end|>\n<|im_start|>assistant\n",
    "import numpy as np\nx = np.zeros(",
]


def complete(base: str, prompt: str | list[int], n: int = 6, **extra: Any) -> dict[str, Any]:
    body = {"prompt": prompt, "max_tokens": n, "temperature": 0, **extra}
    response = httpx.post(f"{base}/v1/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    return dict(response.json())


def streamed_chunks(base: str, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """POST a streaming request and return its SSE data chunks, parsed ([DONE] left out)."""
    with httpx.stream("POST", f"{base}{path}", json=body, timeout=120) as response:
        assert response.status_code == 200
        return [
            json.loads(line[6:])
            for line in response.iter_lines()
            if line.startswith("data: ") and line != "data: [DONE]"
        ]


async def stream_text(client: httpx.AsyncClient, base: str, prompt: str, n: int) -> str:
    body = {"prompt": prompt, "max_tokens": n, "temperature": 0, "stream": True}
    text = ""
    async with client.stream("POST", f"{base}/v1/completions", json=body, timeout=120) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                text += json.loads(line[6:])["choices"][0]["text"]
    return text


def test_concurrent_streams_chunking_and_speculation_keep_solo_tokens(
    backend: ReferenceBackend,
) -> None:
    # solo: each prompt in one forward pass (no checkpoint cuts), no speculation
    with serving(backend, speculation="off", checkpoints=False) as base:
        solo = [complete(base, p)["choices"][0]["text"] for p in PROMPTS]

    async def together(base: str) -> list[str]:
        async with httpx.AsyncClient() as client:
            return list(await asyncio.gather(*(stream_text(client, base, p, 6) for p in PROMPTS)))

    # small chunks and rows force chunked prefill sharing steps with decoding; MTP drafts on
    with serving(backend, speculation="mtp", n_draft=3, max_chunk=4, max_rows=12) as base:
        assert asyncio.run(together(base)) == solo
        slots = httpx.get(f"{base}/v1/slots").json()
    assert sum(s["drafts_proposed"] for s in slots["slots"]) > 0
    with serving(backend, speculation="lookup", n_draft=4) as base:
        assert [complete(base, p)["choices"][0]["text"] for p in PROMPTS] == solo


def test_timings_per_token_streams_a_chunk_for_every_token(backend: ReferenceBackend) -> None:
    """llama-server's `timings_per_token`: a chunk per generated token even when it adds no
    text, counting the tokens so far; the text is the plain stream's."""
    body = {"prompt": PROMPTS[1], "max_tokens": 12, "temperature": 0, "stream": True}
    body |= {"stream_options": {"include_usage": True}, "timings_per_token": True}
    with serving(backend, speculation="off") as base:
        plain = complete(base, PROMPTS[1], 12)["choices"][0]["text"]
        chunks = streamed_chunks(base, "/v1/completions", body)
    counted = [c["timings"]["predicted_n"] for c in chunks if c["choices"] and "timings" in c]
    assert counted == list(range(1, 13))  # one token per step without speculation
    assert chunks[-1]["usage"]["completion_tokens"] == 12
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == plain


def test_prefix_cache_hit_processes_only_new_tokens(backend: ReferenceBackend) -> None:
    first = PROMPTS[2]
    with serving(backend) as base:
        answer = complete(base, first)["choices"][0]["text"]
        follow = first + answer + "<|im_end|>\n<|im_start|>user\nAnd three more?<|im_end|>\n"
        reused = complete(base, follow)
    with serving(backend) as base:
        fresh = complete(base, follow)
    assert reused["choices"][0]["text"] == fresh["choices"][0]["text"]
    usage = reused["usage"]
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    assert cached >= len(backend.tokenizer.encode(first)) - 1
    assert reused["timings"]["prompt_n"] == usage["prompt_tokens"] - cached
    assert fresh["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


def test_chat_completion_whole_and_streamed_agree(backend: ReferenceBackend) -> None:
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 6,
        "temperature": 0,
        "chat_template_kwargs": {"enable_thinking": False},
    }
    with serving(backend) as base:
        whole = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=120).json()
        stream_body = {**body, "stream": True, "stream_options": {"include_usage": True}}
        chunks = streamed_chunks(base, "/v1/chat/completions", stream_body)
    message = whole["choices"][0]["message"]
    assert whole["object"] == "chat.completion" and message["role"] == "assistant"
    streamed = "".join(
        c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]
    )
    assert streamed == (message["content"] or "")
    assert chunks[-1]["usage"]["completion_tokens"] == whole["usage"]["completion_tokens"]
    assert chunks[-2]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]
    # timings_per_token: the same deltas, and a count on a chunk for every generated token
    with serving(backend, speculation="off") as base:
        timed = streamed_chunks(
            base, "/v1/chat/completions", {**stream_body, "timings_per_token": True}
        )
    counted = [c["timings"]["predicted_n"] for c in timed if c["choices"] and "timings" in c]
    assert counted == list(range(1, whole["usage"]["completion_tokens"] + 1))
    assert [
        c["choices"][0]["delta"] for c in timed if c["choices"] and c["choices"][0]["delta"]
    ] == [c["choices"][0]["delta"] for c in chunks if c["choices"] and c["choices"][0]["delta"]]


def _error(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["message"] and error["type"]
    return str(error["message"])


def test_bad_requests_get_openai_errors(backend: ReferenceBackend) -> None:
    chat = "{base}/v1/chat/completions"
    messages = [{"role": "user", "content": "hi"}]
    with serving(backend) as base:
        url = chat.format(base=base)
        assert "JSON" in _error(httpx.post(url, content=b"{not json"), 400)
        assert "temperature" in _error(
            httpx.post(url, json={"messages": messages, "temperature": "hot"}), 400
        )
        assert "max_tokens" in _error(
            httpx.post(url, json={"messages": messages, "max_tokens": 0}), 400
        )
        assert "messages" in _error(httpx.post(url, json={"messages": "hi"}), 400)
        assert "does not exist" in _error(
            httpx.post(url, json={"messages": messages, "model": "gpt-9"}), 404
        )
        assert "stop" in _error(httpx.post(url, json={"messages": messages, "stop": 3}), 400)
        long_prompt = [5 + i % 1000 for i in range(backend.n_ctx + 10)]
        too_long = httpx.post(f"{base}/v1/completions", json={"prompt": long_prompt})
        assert "context" in _error(too_long, 400)
        assert "vocabulary" in _error(
            httpx.post(f"{base}/v1/completions", json={"prompt": [10**9]}), 400
        )
        assert "tokens" in _error(httpx.post(f"{base}/detokenize", json={"tokens": "abc"}), 400)
        assert "content" in _error(httpx.post(f"{base}/tokenize", json={"content": 5}), 400)
        tokens = httpx.post(f"{base}/tokenize", json={"content": "hello world"}).json()["tokens"]
        assert (
            httpx.post(f"{base}/detokenize", json={"tokens": tokens}).json()["content"]
            == "hello world"
        )
        assert httpx.get(f"{base}/health").json() == {"status": "ok"}
        assert httpx.get(f"{base}/v1/models").json()["data"][0]["id"] == tiny_model_path().name


def wait_idle(base: str, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        slots = httpx.get(f"{base}/v1/slots").json()["slots"]
        if all(s["state"] == "idle" for s in slots):
            return True
        time.sleep(0.05)
    return False


def test_disconnect_frees_the_slot_and_metrics_count(backend: ReferenceBackend) -> None:
    with serving(backend) as base:
        body = {"prompt": PROMPTS[0], "max_tokens": 2000, "temperature": 0, "stream": True}
        with httpx.stream("POST", f"{base}/v1/completions", json=body, timeout=60) as response:
            lines = response.iter_lines()
            while not next(lines).startswith("data: "):
                pass
            busy = httpx.get(f"{base}/v1/slots").json()
            assert [s["state"] for s in busy["slots"]].count("decode") == 1
        assert wait_idle(base)
        slots = httpx.get(f"{base}/v1/slots").json()
        assert slots["engine"]["kind"] == "reference" and slots["engine"]["kv_pool_tokens"] == 2048
        with pytest.raises(httpx.TimeoutException):  # a whole-response client that gives up
            httpx.post(f"{base}/v1/completions", json={**body, "stream": False}, timeout=1.0)
        assert wait_idle(base)
        metrics = httpx.get(f"{base}/metrics").text
    assert "openjet_requests_total 2" in metrics
    assert "# TYPE openjet_generated_tokens_total counter" in metrics


def test_pool_exhaustion_is_a_clear_error_and_spares_the_neighbour(tmp_path: Path) -> None:
    small = ReferenceBackend.from_gguf(tiny_model_path(), n_slots=2, kv_tokens=256)
    prompts = [list(range(100, 220)), list(range(300, 420))]  # 9 pages each, 16 in the pool
    with serving(small) as base:
        solo = [complete(base, p, n=24)["choices"][0]["text"] for p in prompts]

        async def both() -> list[httpx.Response]:
            async with httpx.AsyncClient(timeout=120) as client:
                calls = [
                    client.post(
                        f"{base}/v1/completions",
                        json={"prompt": p, "max_tokens": 24, "temperature": 0},
                    )
                    for p in prompts
                ]
                return list(await asyncio.gather(*calls))

        first, second = asyncio.run(both())
    statuses = sorted([first.status_code, second.status_code])
    assert statuses == [200, 503]
    failed, index = (first, 1) if first.status_code == 503 else (second, 0)
    assert "KV pool exhausted" in failed.json()["error"]["message"]
    survivor = (first, second)[index]
    assert survivor.json()["choices"][0]["text"] == solo[index]  # the neighbour is intact


def test_ignore_eos_generates_past_an_end_token(
    backend: ReferenceBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """llama-server's `ignore_eos`: an end-of-generation token does not end the reply. The
    tiny model never draws a real end token, so its 5th greedy token is declared one here."""
    with serving(backend, speculation="off") as base:
        ids = complete(base, PROMPTS[0], 12, return_tokens=True)["choices"][0]["tokens"]
    monkeypatch.setitem(vars(backend.tokenizer), "eog_ids", frozenset({ids[4]}))
    with serving(backend, speculation="off") as base:
        stopped = complete(base, PROMPTS[0], 12, return_tokens=True)
        ignored = complete(base, PROMPTS[0], 12, return_tokens=True, ignore_eos=True)
        bad = httpx.post(
            f"{base}/v1/completions", json={"prompt": "x", "ignore_eos": "yes"}, timeout=60
        )
    first = ids.index(ids[4])  # the declared end token may come earlier in the reply too
    assert stopped["choices"][0]["finish_reason"] == "stop"
    assert stopped["choices"][0]["tokens"] == ids[:first]
    assert ignored["choices"][0]["finish_reason"] == "length"
    assert ignored["choices"][0]["tokens"] == ids
    assert "ignore_eos" in _error(bad, 400)
