"""Choose and prove the engine: the megakernel when the GPU qualifies (kernels compiled and
self-tested), else llama-server (reused or provisioned), each answering a real test request.

The CUDA side is reached only through `megakernel_selftest`, which imports `engine.cuda.selftest`
lazily: a build without it (or a machine without CUDA) is a fallback reason, not a crash.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from engine.llama_server import (
    LlamaServer,
    LlamaServerError,
    cuda_build_available,
    find_llama_server,
    free_port,
    port_in_use,
    provision_llama_server,
)
from setup_wizard.checks import GIB, Check
from setup_wizard.compat import Compatibility
from setup_wizard.hardware import HardwareInfo

MIN_CONTEXT = 4096
MAX_CONTEXT = 262144
DELTANET_STATE_BYTES = 150 * 1024**2  # per slot on the 27B model (design.md)
VRAM_RESERVE = int(1.5 * GIB)  # CUDA context, activations, allocator slack
RAM_RESERVE = 2 * GIB
TEST_PROMPT = [{"role": "user", "content": "Reply with the word OK."}]


@dataclass(frozen=True)
class EngineOutcome:
    kind: str  # "megakernel" or "llama-server"
    ok: bool  # an engine answered a test request
    fallback_reason: str | None
    checks: list[Check]
    port: int
    context_size: int
    slots: int
    llama_server_path: str = ""


@dataclass(frozen=True)
class EngineRequest:
    """What engine selection needs to know, gathered by the wizard."""

    model_path: Path
    model_bytes: int
    gpu_fallback_reason: str | None  # from the hardware checks
    compat: Compatibility
    hardware: HardwareInfo
    host: str
    port: int
    slots: int
    llama_server_path: str  # engine.llama_server_path ("" when unset)


def fit_context(
    free_bytes: int, model_bytes: int, kv_per_token: int, slots: int, model_context: int | None
) -> int:
    """KV pool tokens that fit beside the weights, rounded down to 1024, within sane bounds."""
    room = free_bytes - model_bytes - slots * DELTANET_STATE_BYTES - VRAM_RESERVE
    tokens = max(0, room) // max(1, kv_per_token)
    ceiling = min(MAX_CONTEXT, (model_context or MAX_CONTEXT) * slots)
    floor = min(MIN_CONTEXT, ceiling)
    return max(floor, min(ceiling, tokens // 1024 * 1024 or floor))


def answers_model(host: str, port: int, model_path: Path) -> bool:
    """True when the server on the port is an OpenAI-compatible engine serving this model."""
    try:
        listing = httpx.get(f"http://{host}:{port}/v1/models", timeout=3).json()
    except (httpx.HTTPError, ValueError):
        return False
    names = {str(m.get("id", "")) for m in listing.get("data", []) if isinstance(m, dict)}
    return bool(names & {model_path.name, model_path.stem, str(model_path)})


def choose_port(host: str, wanted: int, model_path: Path) -> tuple[int, Check, bool]:
    """(port, its check, whether an engine already serves this model there).

    A free configured port is used; one held by an engine serving this very model is reused
    (that engine keeps running); any other holder is left alone and another port is chosen.
    """
    if not port_in_use(host, wanted):
        return wanted, Check("port", "pass", f"{host}:{wanted}", "free"), False
    if answers_model(host, wanted, model_path):
        detail = "an engine already serves this model there; it keeps running"
        return wanted, Check("port", "pass", f"{host}:{wanted}", detail), True
    chosen = free_port(host)
    check = Check(
        "port", "warn", f"{host}:{wanted} busy, using {chosen}",
        f"another program listens on port {wanted}; it was left alone",
        f"OpenJet will use port {chosen} (engine.port)",
    )  # fmt: skip
    return chosen, check, False


def _existing_test(host: str, port: int, kind: str) -> Check:
    ok, detail = chat_test(f"http://{host}:{port}")
    return Check("test request", "pass" if ok else "fail", kind, f"running engine {detail}")


def chat_test(base_url: str, timeout: float = 300) -> tuple[bool, str]:
    """Send one short chat completion; (answered, what happened)."""
    started = time.monotonic()
    body = {"messages": TEST_PROMPT, "max_tokens": 8, "temperature": 0}
    try:
        reply = httpx.post(f"{base_url}/v1/chat/completions", json=body, timeout=timeout)
        choice = reply.json()["choices"][0]["message"]
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
        return False, f"no valid answer from {base_url}: {type(exc).__name__}: {exc}"
    if reply.status_code != 200 or choice.get("role") != "assistant":
        return False, f"{base_url} answered HTTP {reply.status_code}: {reply.text[:200]}"
    return True, f"answered a test request in {time.monotonic() - started:.1f} s"


def megakernel_selftest(model_path: Path) -> tuple[bool, str]:
    """Compile the kernels for this GPU and run the self-test; (passed, detail or reason).

    Contract with engine/cuda: `engine.cuda.selftest.run_selftest(model_path)` returns an object
    with `ok: bool` and `detail: str` (e.g. max logit error and tok/s), or raises.
    """
    try:
        selftest = importlib.import_module("engine.cuda.selftest")
    except Exception as exc:
        return False, f"the CUDA engine's self-test is not available ({type(exc).__name__}: {exc})"
    try:
        result = selftest.run_selftest(model_path)
    except Exception as exc:
        return False, f"kernel compile or self-test failed: {type(exc).__name__}: {exc}"
    ok = bool(getattr(result, "ok", False))
    detail = str(getattr(result, "detail", "")) or ("passed" if ok else "failed")
    return ok, f"self-test {detail}" if not detail.startswith("self-test") else detail


def serve_megakernel_test(model_path: Path, host: str, port: int) -> tuple[bool, str]:
    """Start `openjet serve --backend cuda` briefly, send it a test request, stop it."""
    command = [sys.executable, "-m", "openjet", "serve", "--model", str(model_path)]
    command += ["--backend", "cuda", "--host", host, "--port", str(port)]
    base_url = f"http://{host}:{port}"
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 600  # loading 16 GB of weights takes a while
            while time.monotonic() < deadline and process.poll() is None:
                if _healthy(base_url):
                    return chat_test(base_url)
                time.sleep(0.5)
        finally:
            process.terminate()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        log.seek(0)
        tail = log.read().decode(errors="replace")[-600:]
    return False, f"openjet serve did not become ready: {tail or 'timed out'}"


def _healthy(base_url: str) -> bool:
    try:
        return httpx.get(f"{base_url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


Confirm = Callable[[str], bool]
Progress = Callable[[str], None]


def llama_server_binary(
    configured: str, confirm: Confirm, progress: Progress
) -> tuple[Path | None, Check]:
    """Reuse a llama-server (config, PATH, cache) or, with consent, build one."""
    try:
        found = find_llama_server(configured)
    except LlamaServerError as exc:
        return None, Check(
            "llama-server", "fail", configured, str(exc), "fix engine.llama_server_path"
        )
    if found is not None:
        return found.path, Check(
            "llama-server", "pass", str(found.path), f"reusing the one from {found.origin}"
        )
    cuda = cuda_build_available()
    variant = "CUDA" if cuda else "CPU"
    if not confirm(f"Build llama-server ({variant}) from source now? It takes 10-30 minutes"):
        return None, Check(
            "llama-server", "fail", "none", "declined the llama-server build", "run setup again"
        )
    try:
        started = time.monotonic()
        binary = provision_llama_server(cuda=cuda, progress=progress)
    except LlamaServerError as exc:
        return None, Check("llama-server", "fail", "build failed", str(exc), "see the build log")
    minutes = (time.monotonic() - started) / 60
    return binary, Check(
        "llama-server", "pass", str(binary), f"built ({variant}) in {minutes:.1f} min"
    )


def llama_server_test(
    binary: Path, model_path: Path, host: str, port: int, context: int, slots: int
) -> Check:
    """Start llama-server on the port with the configured context, ask it once, stop it."""
    args = ["-c", str(context), "-np", str(slots), "--jinja", "--no-warmup"]
    if cuda_build_available():
        args += ["-ngl", "999"]
    try:
        with LlamaServer(
            binary, model_path, host=host, port=port, extra_args=args, startup_timeout=600
        ) as server:
            ok, detail = chat_test(server.base_url)
    except LlamaServerError as exc:
        return Check("test request", "fail", "llama-server", str(exc), "see the message above")
    return Check("test request", "pass" if ok else "fail", "llama-server", detail)


def _context_for(request: EngineRequest, on_gpu: bool, kv_scale: int) -> int:
    """Fit the KV pool to free VRAM (GPU engines) or available RAM (CPU llama-server)."""
    gpu = request.hardware.best_gpu()
    free = (
        gpu.vram_free_bytes
        if on_gpu and gpu
        else request.hardware.ram_available_bytes - RAM_RESERVE
    )
    kv = (request.compat.kv_bytes_per_token or 34816) * kv_scale
    return fit_context(free, request.model_bytes, kv, request.slots, request.compat.context_length)


def select_engine(request: EngineRequest, confirm: Confirm, progress: Progress) -> EngineOutcome:
    """Try the megakernel when allowed, else fall back to llama-server; prove it answers."""
    port, port_check, serving = choose_port(request.host, request.port, request.model_path)
    checks = [port_check]
    reason = request.gpu_fallback_reason
    if reason is None and not request.compat.engine_can_run:
        reason = f"model: {request.compat.problem}"
    if reason is None:
        progress("compiling the kernels for this GPU and running the self-test")
        passed, detail = megakernel_selftest(request.model_path)
        checks.append(Check("self-test", "pass" if passed else "fail", "megakernel", detail))
        if passed:
            if serving:
                test = _existing_test(request.host, port, "megakernel")
            else:
                answered, detail = serve_megakernel_test(request.model_path, request.host, port)
                test = Check("test request", "pass" if answered else "fail", "megakernel", detail)
            checks.append(test)
            if test.status == "pass":
                context = _context_for(request, on_gpu=True, kv_scale=1)
                return EngineOutcome("megakernel", True, None, checks, port, context, request.slots)
        reason = checks[-1].detail
    return _fallback(request, reason, port, serving, checks, confirm, progress)


def _fallback(
    request: EngineRequest,
    reason: str,
    port: int,
    serving: bool,
    checks: list[Check],
    confirm: Confirm,
    progress: Progress,
) -> EngineOutcome:
    progress(f"using llama-server: {reason}")
    binary, found = llama_server_binary(request.llama_server_path, confirm, progress)
    checks.append(found)
    on_gpu = cuda_build_available()
    # llama.cpp keeps KV in f16: twice the bytes of our q8_0 pool.
    context = _context_for(request, on_gpu=on_gpu, kv_scale=2)
    if binary is None:
        return EngineOutcome("llama-server", False, reason, checks, port, context, request.slots)
    if serving:
        test = _existing_test(request.host, port, "llama-server")
    else:
        test = llama_server_test(
            binary, request.model_path, request.host, port, context, request.slots
        )
    checks.append(test)
    return EngineOutcome(
        "llama-server", test.status == "pass", reason, checks, port, context, request.slots,
        str(binary),
    )  # fmt: skip
