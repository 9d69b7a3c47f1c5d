"""Pieces the benchmark scripts share: the run manifest, a time budget for one device call,
the synthetic GGUF and the llama.cpp build cached on disk (the build runs in a background
thread while the caller does other work), result files and plain-text tables.

Nothing here needs a GPU: on a machine without one the manifest says so and the scripts run
their CPU smoke modes.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

Progress = Callable[[str], None]


_STARTED = time.monotonic()


def say(message: str) -> None:
    """A progress line on stderr, stamped with the seconds since the script started."""
    print(f"[{time.monotonic() - _STARTED:7.1f}s] {message}", file=sys.stderr, flush=True)


def sh(cmd: Sequence[str], timeout: float = 20, env: dict[str, str] | None = None) -> str:
    """A command's stdout, stripped; empty when it is missing or fails."""
    try:
        done = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, env=env)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip()


def worktree_tree(root: Path = ROOT) -> str:
    """The git tree id of the files as they are in `root`'s working tree (tracked ones with their
    changes, and untracked ones git does not ignore), or "" outside git. A run's "commit" names
    HEAD, which on a device call is the checkout's start while the files measured are the
    session's working tree; this id equals `git rev-parse C^{tree}` for the commit C whose
    files those were (`git log --format='%h %T' | grep TREE` finds it). Built in a copy of the
    index, so the checkout's own index is left as it was. `root` may also be a copy of another
    commit inside the checkout (gpu_check.sh's `_main/`, `_tree_*/`, made by `git archive`):
    the id is then that of the copy's files, read through the enclosing repository."""
    git_dir = sh(["git", "-C", str(root), "rev-parse", "--absolute-git-dir"])
    if not git_dir:
        return ""
    git = ["git", f"--git-dir={git_dir}", f"--work-tree={root}", "-C", str(root)]
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp) / "index"
        real = Path(git_dir) / "index"
        if real.exists():  # its cached file stats spare re-reading unchanged files
            shutil.copyfile(real, scratch)
        env = {**os.environ, "GIT_INDEX_FILE": str(scratch)}
        # not the copies that gpu_check.sh's compare modes are handed
        sh([*git, "add", "-A", "--", ".", ":(exclude)_main", ":(exclude)_tree_*"], 60, env)
        return sh([*git, "write-tree"], env=env)


def is_checkout(root: Path = ROOT) -> bool:
    """Whether `root` is a git checkout's top (not a copy inside another checkout, whose HEAD
    and status say nothing about the copy's files)."""
    top = sh(["git", "-C", str(root), "rev-parse", "--show-toplevel"])
    return bool(top) and Path(top).resolve() == root.resolve()


def _cuda_props() -> dict[str, Any]:
    """GPU name, SM count and versions as CuPy sees them (empty without CuPy or a GPU)."""
    try:
        import cupy as cp

        props = cp.cuda.runtime.getDeviceProperties(0)
        return {
            "gpu": props["name"].decode(),
            "sms": props["multiProcessorCount"],
            "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(),
            "cupy": cp.__version__,
        }
    except Exception:  # no CuPy, no driver, no device: a CPU run
        return {}


def add_config_argument(parser: argparse.ArgumentParser) -> None:
    """--config: one MatmulConfig setting for the products of a whole step (product_kernels
    .matmul_config reads it: "default" or FIELD=INT joined by "+")."""
    parser.add_argument(
        "--config",
        default="default",
        help='the products\' MatmulConfig: "default" or FIELD=INT+...',
    )


def setting_fields(setting: str) -> dict[str, int]:
    """A sweep's setting as config fields: FIELD=INT joined by "+" ("" for none)."""
    return {k: int(v) for k, v in (kv.split("=") for kv in setting.split("+") if kv)}


def ncu_raw_rows(lines: Iterable[str]) -> tuple[dict[str, str], list[dict[str, str]]]:
    """`ncu --csv --page raw` output as (each column's unit, one dict per profiled launch). Lines
    that are not CSV rows (the program's own output, ncu's notes) are skipped; ({}, []) where
    no row names a "Kernel Name" column. The row after the header holds the units."""
    rows = list(csv.reader(line for line in lines if line.startswith('"')))
    head = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if head is None or head + 1 >= len(rows):
        return {}, []
    names = rows[head]
    units = dict(zip(names, rows[head + 1], strict=False))
    return units, [
        dict(zip(names, r, strict=True)) for r in rows[head + 2 :] if len(r) == len(names)
    ]


def require_gpu(script: str) -> None:
    """Stop a GPU-only benchmark with a clear message (exit status 2) where CuPy reaches no GPU."""
    if not _cuda_props():
        print(f"{script}: needs a CUDA GPU, and CuPy reaches none here", file=sys.stderr)
        raise SystemExit(2)


def manifest() -> dict[str, Any]:
    """What a result depends on: GPU, clocks, driver, CUDA, commit (and the host, for CPU runs)."""
    query = "name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.draw,temperature.gpu"
    nvcc = sh(["nvcc", "--version"]).splitlines()
    git, checkout = ["git", "-C", str(ROOT)], is_checkout()
    info: dict[str, Any] = {
        "gpu": None,
        "sms": None,
        "cuda_runtime": None,
        "cupy": None,
        **_cuda_props(),
        "nvidia_smi": sh(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"]),
        "nvcc": nvcc[-1] if nvcc else "",
        # a copy inside a checkout (gpu_check.sh's _main/) is named by its tree alone
        "commit": (checkout and sh([*git, "rev-parse", "--short", "HEAD"])) or "unknown",
        "dirty": checkout and bool(sh([*git, "status", "--porcelain", "--untracked-files=no"])),
        "tree": worktree_tree() or "unknown",  # the files measured (worktree_tree says how)
        "host_cpus": os.cpu_count(),
        "python": platform.python_version(),
        "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    return info


class Budget:
    """The seconds one run may take (a device call is limited); measurements ask before starting."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.start = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def left(self) -> float:
        return self.seconds - self.elapsed()

    def allows(self, needed: float) -> bool:
        return self.left() >= needed


def synthetic_gguf(cache: Path, preset: str, quant: str, seed: int = 0) -> Path:
    """The random-weight GGUF of a preset and quant mix, written once into the cache."""
    from engine.synthetic import write_synthetic

    path = cache / "bench-models" / f"{preset}-{quant}-seed{seed}.gguf"
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.stem}.{os.getpid()}.tmp.gguf")  # concurrent writers
    started = time.monotonic()
    say(f"writing synthetic {preset} {quant} GGUF to {path}")
    try:
        write_synthetic(partial, preset, quant, seed)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    say(f"GGUF written in {time.monotonic() - started:.0f} s ({path.stat().st_size / 1e9:.2f} GB)")
    return path


def normal_token_limit(gguf_path: Path) -> int:
    """Token ids below this are ordinary vocabulary (specials and padding come after them)."""
    from engine.gguf_file import open_gguf

    model = open_gguf(gguf_path)
    types = list(model.metadata.get("tokenizer.ggml.token_type", []))
    for index, kind in enumerate(types):
        if int(kind) != 1:
            return index
    return len(types) or model.config.n_vocab


class LlamaBuild:
    """llama.cpp targets provisioned in a background thread (engine/llama_server.py's cache)."""

    def __init__(self, cache: Path, cuda: bool, targets: Sequence[str], jobs: int | None = None):
        self.cache, self.cuda, self.targets, self.jobs = cache, cuda, list(targets), jobs
        self.binary_dir: Path | None = None
        self.error: str | None = None
        self.seconds = 0.0
        self._thread = threading.Thread(target=self._run, name="llama-build", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from engine.llama_server import LlamaServerError, provision_llama_server

        started = time.monotonic()
        try:
            binary = provision_llama_server(
                self.cache, cuda=self.cuda, jobs=self.jobs, targets=self.targets, progress=say
            )
            self.binary_dir = binary.parent
        except (LlamaServerError, OSError) as exc:
            self.error = str(exc)
        self.seconds = time.monotonic() - started

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def wait(self, timeout: float | None = None) -> Path:
        """The folder holding the built binaries; raises RuntimeError when the build failed."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise RuntimeError(f"llama.cpp build still running after {timeout:.0f} s")
        if self.binary_dir is None:
            raise RuntimeError(f"llama.cpp build failed: {self.error}")
        return self.binary_dir


def build_jobs() -> int:
    """Compile jobs that leave a core or two for the measurements running beside the build."""
    cores = os.cpu_count() or 1
    return max(1, cores - 2) if cores > 4 else cores


def results_path(name: str, out: Path | None = None) -> Path:
    """Where a run's JSON goes: --json, else $OUT (the device call's folder), else bench/results/."""
    if out is not None:
        return out
    if os.environ.get("OUT"):
        return Path(os.environ["OUT"]) / f"{name}.json"
    stamp = time.strftime("%Y-%m-%d_%H%M", time.gmtime())
    return ROOT / "bench" / "results" / f"{stamp}_{name}.json"


def write_results(path: Path, info: dict[str, Any], quiet: bool = False) -> Path:
    """Write the JSON whole (a temporary file renamed in: a reader never sees half of it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".tmp")
    partial.write_text(json.dumps(info, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(partial, path)
    if not quiet:
        say(f"results written to {path}")
    return path


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def ratio(ours: float | None, theirs: float | None) -> float | None:
    """ours / theirs, or None when either side was not measured."""
    if not ours or not theirs:
        return None
    return ours / theirs


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table (floats to 3 significant places, None as '-')."""

    def cell(value: Any) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
        return str(value)

    lines = ["| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
