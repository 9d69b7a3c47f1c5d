"""`openjet serve --backend llama-server`: a real llama-server behind the same API surface.

The app starts llama-server (`engine/llama_server.py`) on a private loopback port, validates
chat and completion requests with the engine's own rules (so bad requests get the same OpenAI
errors as from our engine), and forwards everything else byte for byte, streaming included; a
client that disconnects closes the upstream stream, which makes llama-server stop that slot.
`/v1/slots` is rebuilt from llama-server's `/slots` in the engine's shape (kind "llama-server").
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import httpx
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from engine.llama_server import LlamaServer, LlamaServerError, find_llama_server
from engine.server_requests import ApiError, parse_chat, parse_completion, parse_json

if TYPE_CHECKING:
    from engine.server_launch import LaunchOptions

_HOP_HEADERS = {"host", "content-length", "connection", "transfer-encoding", "keep-alive"}


def llama_server_args(options: LaunchOptions) -> list[str]:
    args = ["--parallel", str(options.slots), "--jinja", "--metrics", "--alias", options.model.name]
    if options.kv_tokens:
        args += ["-c", str(options.kv_tokens)]
    return [*args, "-ngl", "999"]  # all layers on the GPU when the build has one


class Proxy:
    def __init__(self, options: LaunchOptions, fallback_reason: str | None) -> None:
        from engine.server_launch import LaunchError

        try:
            found = find_llama_server(options.llama_server_path)
        except LlamaServerError as exc:
            raise LaunchError(str(exc)) from exc
        if found is None:
            raise LaunchError(
                "no llama-server binary found (not configured, not on PATH, not built): "
                "run `openjet setup` to build it, or set engine.llama_server_path"
            )
        self.options = options
        self.fallback_reason = fallback_reason
        self.server = LlamaServer(found.path, options.model, extra_args=llama_server_args(options))
        path = options.model
        self.model_ids = frozenset({path.name, path.stem, str(path), "default"})
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=10.0))

    @property
    def upstream(self) -> str:
        return self.server.base_url

    async def forward(self, request: Request) -> Response:
        body = await request.body()
        path = request.url.path
        try:
            if path in ("/v1/chat/completions", "/v1/completions"):
                self._validate(path, body)
        except ApiError as exc:
            return JSONResponse(exc.body(), status_code=exc.status)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
        upstream = self.client.build_request(
            request.method,
            self.upstream + path,
            params=request.query_params,
            headers=headers,
            content=body,
        )
        try:
            reply = await self.client.send(upstream, stream=True)
        except httpx.HTTPError as exc:
            error = ApiError(502, f"llama-server did not answer: {exc}", kind="server_error")
            return JSONResponse(error.body(), status_code=502)
        kept = {k: v for k, v in reply.headers.items() if k.lower() not in _HOP_HEADERS}
        return StreamingResponse(
            reply.aiter_raw(),
            status_code=reply.status_code,
            headers=kept,
            background=BackgroundTask(reply.aclose),
        )

    def _validate(self, path: str, raw: bytes) -> None:
        body = parse_json(raw)
        if path == "/v1/chat/completions":
            parse_chat(body, self.model_ids, secrets.randbits(63))
        else:
            parse_completion(body, self.model_ids, secrets.randbits(63))

    async def slots(self, request: Request) -> Response:
        try:
            reply = await self.client.get(self.upstream + "/slots")
            upstream = reply.json() if reply.status_code == 200 else []
        except (httpx.HTTPError, ValueError):
            upstream = []
        return JSONResponse(self.slots_document(upstream if isinstance(upstream, list) else []))

    def slots_document(self, upstream: list[dict[str, Any]]) -> dict[str, Any]:
        slots: list[dict[str, Any]] = []
        for item in upstream:
            busy = bool(item.get("is_processing"))
            decoded = 0
            for token in item.get("next_token") or []:
                decoded = int(token.get("n_decoded", 0))
            slots.append(
                {
                    "id": int(item.get("id", len(slots))),
                    "state": "decode" if busy else "idle",
                    "tokens_per_second": 0.0,
                    "context_used": decoded,
                    "context_limit": int(item.get("n_ctx", 0)),
                    "cached_tokens": 0,
                    "drafts_proposed": 0,
                    "drafts_accepted": 0,
                    "request_id": str(item.get("id_task")) if busy else None,
                }
            )
        engine = {
            "kind": "llama-server",
            "model": self.options.model.name,
            "fallback_reason": self.fallback_reason,
            "vram_used_bytes": None,
            "vram_total_bytes": None,
            "kv_pool_tokens": sum(s["context_limit"] for s in slots),
            "kv_pool_used": sum(s["context_used"] for s in slots),
            "tokens_per_second": 0.0,
        }
        return {"engine": engine, "slots": slots, "queued": 0}


def create_proxy_app(options: LaunchOptions, fallback_reason: str | None) -> Starlette:
    proxy = Proxy(options, fallback_reason)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        proxy.server.start()
        try:
            yield
        finally:
            await proxy.client.aclose()
            proxy.server.stop()

    methods = ["GET", "POST", "OPTIONS"]
    routes = [
        Route("/v1/slots", proxy.slots, methods=["GET"]),
        Route("/{path:path}", proxy.forward, methods=methods),
    ]
    return Starlette(routes=routes, lifespan=lifespan)
