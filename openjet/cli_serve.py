"""`openjet serve` (run the inference engine's HTTP server) and `openjet top` (watch its slots).

`serve` reads its defaults from the config (`engine.*`) and lets flags override them. `top`
polls `GET /v1/slots` and redraws a Rich table: per slot its state, tok/s, context used/limit,
cached prompt tokens, draft acceptance and current request, plus the engine's aggregate tok/s.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from rich.console import Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from openjet.config import ConfigError, load_config

# engine.kind as setup records it -> the backend `serve` starts by default
SETUP_BACKENDS = {"megakernel": "cuda", "reference": "cpu", "llama-server": "llama-server"}


def serve(
    model: Annotated[
        Path | None,
        typer.Option("--model", help="GGUF file to serve (default: engine.model_path)."),
    ] = None,
    backend: Annotated[
        str | None,
        typer.Option(
            "--backend", help="auto | cuda | cpu | llama-server (default: what setup chose)"
        ),
    ] = None,
    host: Annotated[
        str | None, typer.Option("--host", help="Address to bind (default 127.0.0.1).")
    ] = None,
    port: Annotated[
        int | None, typer.Option("--port", help="Port (default engine.port, 18080).")
    ] = None,
    slots: Annotated[
        int | None, typer.Option("--slots", help="Parallel slots, 1-8 (default 4).")
    ] = None,
    kv_tokens: Annotated[
        int | None, typer.Option("--kv-tokens", help="KV pool size in tokens.")
    ] = None,
    n_draft: Annotated[
        int | None, typer.Option("--n-draft", help="Draft tokens per slot, 0-4.")
    ] = None,
    speculation: Annotated[
        str | None, typer.Option("--speculation", help="off | mtp | lookup | mtp+lookup")
    ] = None,
) -> None:
    """Serve a model through the OpenAI-compatible API (http://HOST:PORT/v1)."""
    from engine.drafting import DRAFT_MODES
    from engine.scheduler import SchedulerConfig
    from engine.server_launch import BACKEND_CHOICES, LaunchError, LaunchOptions, run

    try:
        config = load_config()
    except ConfigError as exc:
        raise _fail(str(exc)) from exc
    path = model or Path(str(config.get("engine.model_path") or ""))
    if not str(path) or str(path) == ".":
        raise _fail("no model given: pass --model PATH or set engine.model_path")
    chosen = str(config.get("engine.kind"))
    backend = backend or SETUP_BACKENDS.get(chosen, "auto")
    n_slots = slots if slots is not None else int(config.get("engine.slots"))
    drafts = n_draft if n_draft is not None else int(config.get("engine.n_draft"))
    mode = speculation or str(config.get("engine.speculation"))
    problems = [
        (backend not in BACKEND_CHOICES, f"--backend must be one of {', '.join(BACKEND_CHOICES)}"),
        (not 1 <= n_slots <= 8, "--slots must be between 1 and 8"),
        (not 0 <= drafts <= 4, "--n-draft must be between 0 and 4"),
        (mode not in DRAFT_MODES, f"--speculation must be one of {', '.join(DRAFT_MODES)}"),
        (kv_tokens is not None and kv_tokens < 256, "--kv-tokens must be at least 256"),
    ]
    for bad, message in problems:
        if bad:
            raise _fail(message)
    pool = kv_tokens or (
        config.get("engine.context_size") if "engine.context_size" in config.values else None
    )
    options = LaunchOptions(
        model=path.expanduser(),
        backend=backend,
        host=host or str(config.get("engine.host")),
        port=port or int(config.get("engine.port")),
        slots=n_slots,
        kv_tokens=pool,
        scheduler=SchedulerConfig(
            speculation=mode,
            n_draft=drafts,
            checkpoint_interval=int(config.get("engine.checkpoint_interval")),
        ),
        llama_server_path=str(config.get("engine.llama_server_path")),
        fallback_reason=str(config.get("engine.fallback_reason")) or None,
    )
    typer.echo(
        f"openjet engine: serving {options.model.name} on http://{options.host}:{options.port}/v1"
    )
    try:
        run(options)
    except LaunchError as exc:
        raise _fail(str(exc)) from exc


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code=2)


def top(
    endpoint: Annotated[
        str | None, typer.Option("--endpoint", help="Engine base URL (default from config).")
    ] = None,
    interval: Annotated[float, typer.Option("--interval", help="Seconds between refreshes.")] = 1.0,
    once: Annotated[bool, typer.Option("--once", help="Print one table and exit.")] = False,
) -> None:
    """Live per-slot statistics of the running engine."""
    try:
        config = load_config()
    except ConfigError as exc:
        raise _fail(str(exc)) from exc
    base = endpoint or f"http://{config.get('engine.host')}:{config.get('engine.port')}/v1"
    url = base.rstrip("/") + "/slots"
    if once:
        document = _fetch(url)
        if document is None:
            raise _fail(f"no engine answers at {url}")
        from rich.console import Console

        Console().print(render_slots(document))
        return
    with Live(render_slots(_fetch(url), url), auto_refresh=False) as live:
        try:
            while True:
                time.sleep(max(interval, 0.1))
                live.update(render_slots(_fetch(url), url), refresh=True)
        except KeyboardInterrupt:
            pass


def _fetch(url: str) -> dict[str, Any] | None:
    try:
        response = httpx.get(url, timeout=5.0)
        response.raise_for_status()
        data = response.json()
        return data if isinstance(data, dict) else None
    except (httpx.HTTPError, ValueError):
        return None


def render_slots(document: dict[str, Any] | None, url: str = "") -> Group:
    """The `top` view of one `/v1/slots` document (or a notice when none came)."""
    if document is None:
        return Group(Text(f"waiting for the engine at {url} …", style="yellow"))
    engine = document.get("engine", {})
    title = Text.assemble(
        (f"{engine.get('kind', '?')} ", "bold"),
        f"{engine.get('model', '')}  ",
        (f"{engine.get('tokens_per_second', 0.0):.1f} tok/s", "bold green"),
        f"  KV {engine.get('kv_pool_used', 0)}/{engine.get('kv_pool_tokens', 0)}",
        f"  queued {document.get('queued', 0)}",
    )
    if engine.get("fallback_reason"):
        title.append(f"\nfallback: {engine['fallback_reason']}", style="yellow")
    table = Table("slot", "state", "tok/s", "context", "cached", "drafts", "request")
    for slot in document.get("slots", []):
        proposed, accepted = slot.get("drafts_proposed", 0), slot.get("drafts_accepted", 0)
        rate = f"{accepted}/{proposed} ({100 * accepted / proposed:.0f}%)" if proposed else "-"
        state = slot.get("state", "?")
        table.add_row(
            str(slot.get("id")),
            Text(
                state,
                style="green" if state == "decode" else "cyan" if state == "prefill" else "dim",
            ),
            f"{slot.get('tokens_per_second', 0.0):.1f}",
            f"{slot.get('context_used', 0)}/{slot.get('context_limit', 0)}",
            str(slot.get("cached_tokens", 0)),
            rate,
            slot.get("request_id") or "",
        )
    return Group(title, table)


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
    app.command("top")(top)
