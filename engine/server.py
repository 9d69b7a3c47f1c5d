"""The engine's OpenAI-compatible HTTP API (Starlette + uvicorn + sse-starlette).

Routes: `POST /v1/chat/completions`, `POST /v1/completions` (both streamed as SSE or whole),
`GET /v1/models`, `GET /health`, `GET /metrics`, `GET /v1/slots`, `POST /tokenize`,
`POST /detokenize`. Chat requests are rendered with the GGUF's own template, and the model's
output is parsed into reasoning, content and OpenAI `tool_calls` — also as streaming deltas.

The backend runs in the scheduler's engine thread; handlers talk to it only through
`EngineBridge`. A queued streaming request gets SSE comments with its queue position; a client
that disconnects cancels its request at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from engine.backend import Backend
from engine.chat import ChatTemplateError
from engine.scheduler import Scheduler
from engine.scheduler_events import Finished, GenerationRequest, Usage
from engine.server_generation import EngineBridge, generate_text
from engine.server_openai import ChunkMaker, metrics_text, slots_json
from engine.server_requests import (
    ApiError,
    GenerationOptions,
    parse_chat,
    parse_completion,
    parse_json,
)
from engine.tool_call_parser import ToolCallParser

Handler = Callable[[Request], Awaitable[Response]]


@dataclass
class ServedModel:
    """What the server serves: the scheduler over a backend, and how to name it."""

    scheduler: Scheduler
    name: str
    aliases: frozenset[str] = frozenset()
    fallback_reason: str | None = None

    @property
    def backend(self) -> Backend:
        return self.scheduler.backend

    @property
    def model_ids(self) -> frozenset[str]:
        return self.aliases | {self.name, "default"}


def _error(exc: ApiError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)


def _finish_error(finished: Finished) -> ApiError:
    message = finished.error or "generation failed"
    status = 503 if "exhausted" in message else 500
    return ApiError(status, message, code="engine_error", kind="server_error")


def api(handler: Handler) -> Handler:
    """Turn ApiError into its OpenAI error response."""

    async def wrapped(request: Request) -> Response:
        try:
            return await handler(request)
        except ApiError as exc:
            return _error(exc)

    return wrapped


class Api:
    def __init__(self, served: ServedModel) -> None:
        self.served = served
        self.bridge = EngineBridge(served.scheduler)
        backend = served.backend
        self.tokenizer = backend.tokenizer
        self.template = backend.chat_template

    # -- request → generation ----------------------------------------------------------------

    def _generation(self, prompt: list[int], options: GenerationOptions) -> GenerationRequest:
        n_ctx = self.served.backend.n_ctx
        if len(prompt) + 1 > n_ctx:
            raise ApiError(
                400,
                f"the prompt has {len(prompt)} tokens, more than the context of {n_ctx} allows",
                "messages",
                "context_length_exceeded",
            )
        room = n_ctx - len(prompt)
        return GenerationRequest(
            prompt=prompt,
            sampling=options.sampling,
            max_tokens=min(options.max_tokens or room, room),
            stop_ids=frozenset() if options.ignore_eos else self.tokenizer.eog_ids,
            n_draft=options.n_draft,
        )

    async def _collect(
        self, request: Request, generation: GenerationRequest, stops: list[str]
    ) -> tuple[str, list[int], Finished]:
        """Run a whole (non-streamed) generation; a client that goes away cancels it.
        Returns the text, the token ids and how it ended."""
        parts: list[str] = []
        tokens: list[int] = []
        finished: Finished | None = None

        async def run() -> None:
            nonlocal finished
            async for piece in generate_text(self.bridge, self.tokenizer, generation, stops):
                parts.append(piece.text)
                tokens.extend(piece.tokens)
                finished = piece.finished or finished

        task = asyncio.create_task(run())
        while not task.done():
            await asyncio.wait({task}, timeout=0.25)
            if not task.done() and await request.is_disconnected():
                task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if finished is None:
            finished = Finished("cancelled", Usage(prompt_tokens=len(generation.prompt)))
        return "".join(parts), tokens, finished

    # -- routes ------------------------------------------------------------------------------

    async def chat(self, request: Request) -> Response:
        chat = parse_chat(parse_json(await request.body()), self.served.model_ids, _seed())
        try:
            text = self.template.render(
                chat.messages, chat.tools or None, True, chat.enable_thinking
            )
        except ChatTemplateError as exc:
            raise ApiError(400, str(exc), "messages") from exc
        generation = self._generation(self.tokenizer.encode(text), chat.options)
        thinking = text.rstrip().endswith("<think>")
        parser = ToolCallParser(chat.tools, thinking=thinking)
        maker = ChunkMaker(self._model(chat.options), chat=True)
        if chat.options.stream:
            stream = self._chat_stream(maker, parser, generation, chat.options)
            return EventSourceResponse(stream, ping=15)
        text_out, _, finished = await self._collect(request, generation, chat.options.stops)
        if finished.reason == "error":
            raise _finish_error(finished)
        parser.feed(text_out)
        message = parser.finish()
        reason = "tool_calls" if message.tool_calls else _reason(finished)
        return JSONResponse(maker.whole(message.to_message(), reason, finished.usage))

    async def _chat_stream(
        self,
        maker: ChunkMaker,
        parser: ToolCallParser,
        generation: GenerationRequest,
        options: GenerationOptions,
    ) -> AsyncIterator[Any]:
        yield _data(maker.delta({"role": "assistant", "content": ""}))
        streamed = {"content": "", "reasoning": ""}
        produced = 0
        async for piece in generate_text(self.bridge, self.tokenizer, generation, options.stops):
            if piece.queued is not None:
                yield ServerSentEvent(comment=f"queued: position {piece.queued}")
            chunks = []
            for event in parser.feed(piece.text) if piece.text else []:
                if event.kind in streamed:
                    streamed[event.kind] += event.text
                chunks.append(maker.delta(event.to_delta()))
            produced += len(piece.tokens)
            if options.timings_per_token and piece.tokens:  # also when the parser holds text back
                chunks = _counted(chunks, maker.delta({}), produced)
            for chunk in chunks:
                yield _data(chunk)
            if piece.finished is not None:
                for item in self._chat_end(maker, parser, streamed, piece.finished, options):
                    yield item
        yield "[DONE]"

    def _chat_end(
        self,
        maker: ChunkMaker,
        parser: ToolCallParser,
        streamed: dict[str, str],
        finished: Finished,
        options: GenerationOptions,
    ) -> list[Any]:
        if finished.reason == "error":
            return [_data(_finish_error(finished).body())]
        message = parser.finish()
        out = []
        for kind, key, full in (
            ("content", "content", message.content),
            ("reasoning", "reasoning_content", message.reasoning_content),
        ):
            if full.startswith(streamed[kind]) and len(full) > len(streamed[kind]):
                out.append(_data(maker.delta({key: full[len(streamed[kind]) :]})))
        reason = "tool_calls" if message.tool_calls else _reason(finished)
        out.append(_data(maker.delta({}, reason)))
        if options.include_usage:
            out.append(_data(maker.usage(finished.usage)))
        return out

    async def completion(self, request: Request) -> Response:
        parsed = parse_completion(parse_json(await request.body()), self.served.model_ids, _seed())
        prompt = (
            parsed.prompt
            if isinstance(parsed.prompt, list)
            else self.tokenizer.encode(parsed.prompt)
        )
        self._check_tokens(prompt, "prompt")
        generation = self._generation(prompt, parsed.options)
        maker = ChunkMaker(self._model(parsed.options), chat=False)
        if parsed.options.stream:
            return EventSourceResponse(
                self._text_stream(maker, generation, parsed.options), ping=15
            )
        text, tokens, finished = await self._collect(request, generation, parsed.options.stops)
        if finished.reason == "error":
            raise _finish_error(finished)
        body = maker.whole({"content": text}, _reason(finished), finished.usage)
        if parsed.return_tokens:  # llama-server's extension: the generated token ids
            body["choices"][0]["tokens"] = tokens
        return JSONResponse(body)

    async def _text_stream(
        self, maker: ChunkMaker, generation: GenerationRequest, options: GenerationOptions
    ) -> AsyncIterator[Any]:
        produced = 0
        async for piece in generate_text(self.bridge, self.tokenizer, generation, options.stops):
            if piece.queued is not None:
                yield ServerSentEvent(comment=f"queued: position {piece.queued}")
            produced += len(piece.tokens)
            chunks = [maker.delta({"content": piece.text})] if piece.text else []
            if options.timings_per_token and piece.tokens:  # also for a token without text
                chunks = _counted(chunks, maker.delta({"content": ""}), produced)
            for chunk in chunks:
                yield _data(chunk)
            if piece.finished is not None:
                if piece.finished.reason == "error":
                    yield _data(_finish_error(piece.finished).body())
                    return
                yield _data(maker.delta({}, _reason(piece.finished)))
                if options.include_usage:
                    yield _data(maker.usage(piece.finished.usage))
        yield "[DONE]"

    async def models(self, request: Request) -> Response:
        backend = self.served.backend
        entry = {
            "id": self.served.name,
            "object": "model",
            "created": 0,
            "owned_by": "openjet",
            "meta": {
                "n_ctx": backend.n_ctx,
                "n_vocab": backend.n_vocab,
                "n_slots": backend.n_slots,
                "kind": backend.kind,
            },
        }
        return JSONResponse({"object": "list", "data": [entry]})

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def slots(self, request: Request) -> Response:
        backend = self.served.backend
        memory = backend.memory_info()
        document = slots_json(
            self.served.scheduler.snapshot(),
            backend.kind,
            self.served.name,
            self.served.fallback_reason,
            (memory.used_bytes, memory.total_bytes),
        )
        return JSONResponse(document)

    async def metrics(self, request: Request) -> Response:
        return PlainTextResponse(
            metrics_text(self.served.scheduler.snapshot()), media_type="text/plain; version=0.0.4"
        )

    async def tokenize(self, request: Request) -> Response:
        body = parse_json(await request.body())
        content = body.get("content")
        if not isinstance(content, str):
            raise ApiError(400, "'content' must be a string", "content")
        special = body.get("parse_special", True)
        if not isinstance(special, bool):
            raise ApiError(400, "'parse_special' must be true or false", "parse_special")
        tokens = self.tokenizer.encode(content, parse_special=special)
        if body.get("with_pieces") is True:
            pieces = [{"id": t, "piece": self.tokenizer.token_text(t)} for t in tokens]
            return JSONResponse({"tokens": pieces})
        return JSONResponse({"tokens": tokens})

    async def detokenize(self, request: Request) -> Response:
        body = parse_json(await request.body())
        tokens = body.get("tokens")
        if not isinstance(tokens, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in tokens
        ):
            raise ApiError(400, "'tokens' must be a list of token ids", "tokens")
        self._check_tokens(tokens, "tokens")
        return JSONResponse({"content": self.tokenizer.decode(tokens)})

    def _check_tokens(self, tokens: list[int], param: str) -> None:
        n_vocab = self.served.backend.n_vocab
        bad = [t for t in tokens if not 0 <= t < n_vocab]
        if bad:
            raise ApiError(
                400, f"token id {bad[0]} is outside the vocabulary (0..{n_vocab - 1})", param
            )

    def _model(self, options: GenerationOptions) -> str:
        return options.model or self.served.name


def _counted(chunks: list[dict[str, Any]], blank: dict[str, Any], produced: int) -> list[dict[str, Any]]:  # fmt: skip
    """llama-server's timings_per_token: the last chunk of a piece (`blank` when the piece has
    none) carries the count of tokens generated so far."""
    chunks = chunks or [blank]
    chunks[-1]["timings"] = {"predicted_n": produced}
    return chunks


def _reason(finished: Finished) -> str:
    return "length" if finished.reason == "length" else "stop"


def _data(payload: dict[str, Any]) -> str:
    return json.dumps(payload, ensure_ascii=False)


def _seed() -> int:
    return secrets.randbits(63)


def create_app(served: ServedModel) -> Starlette:
    """The ASGI app; its lifespan starts and stops the engine thread."""
    handlers = Api(served)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        served.scheduler.start()
        try:
            yield
        finally:
            served.scheduler.stop()

    routes = [
        Route("/v1/chat/completions", api(handlers.chat), methods=["POST"]),
        Route("/v1/completions", api(handlers.completion), methods=["POST"]),
        Route("/v1/models", api(handlers.models), methods=["GET"]),
        Route("/v1/slots", api(handlers.slots), methods=["GET"]),
        Route("/health", api(handlers.health), methods=["GET"]),
        Route("/metrics", api(handlers.metrics), methods=["GET"]),
        Route("/tokenize", api(handlers.tokenize), methods=["POST"]),
        Route("/detokenize", api(handlers.detokenize), methods=["POST"]),
    ]
    return Starlette(
        routes=routes, lifespan=lifespan, exception_handlers={Exception: _internal_error}
    )


async def _internal_error(request: Request, exc: Exception) -> Response:
    error = ApiError(500, f"internal error: {type(exc).__name__}: {exc}", kind="server_error")
    return _error(error)
