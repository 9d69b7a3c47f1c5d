"""Setup's model step: decide where the model comes from, fetch it when needed, verify it.

`locate_model` runs before the disk check (it says how many bytes a download still needs);
`obtain_model` then downloads and verifies. A file setup did not create is never deleted or
overwritten: a different file under the model's name is reported, not replaced.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from setup_wizard import model_download as dl
from setup_wizard.checks import Check, gib

T = TypeVar("T")


@dataclass
class ModelPlan:
    target: Path  # where the model is or will be
    source: str  # "local" (--model), "configured", "downloaded" (already here), "hub"
    remote: dl.RemoteFile | None = None
    bytes_to_download: int = 0
    problem: Check | None = None  # set when the model cannot be had at all


def _hub_name() -> str:
    return f"{dl.MODEL_REPO}/{dl.MODEL_FILE}"


def locate_model(explicit: Path | None, configured: str, models_dir: Path) -> ModelPlan:
    if explicit is not None:
        path = explicit.expanduser().absolute()
        if not path.is_file():
            problem = Check("model", "fail", str(path), "no such file", "check the --model path")
            return ModelPlan(path, "local", problem=problem)
        return ModelPlan(path, "local")
    if configured and Path(configured).is_file():  # chosen by an earlier setup: keep it
        return ModelPlan(Path(configured), "configured")
    target = models_dir / dl.MODEL_FILE
    if dl.recorded_sha256(target):
        return ModelPlan(target, "downloaded")
    try:
        remote = dl.remote_file()
    except dl.DownloadError as exc:
        problem = Check("model", "fail", _hub_name(), str(exc), "check the network or HF_ENDPOINT")
        return ModelPlan(target, "hub", problem=problem)
    needed = 0 if target.is_file() else dl.bytes_still_needed(remote, target)
    return ModelPlan(target, "hub", remote, needed)


def _progress_bar(console: Console, label: str) -> Progress:
    return Progress(
        TextColumn(label),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )


def _with_bar(console: Console, label: str, work: Callable[[dl.ProgressHook], T]) -> T:
    with _progress_bar(console, label) as bar:
        task = bar.add_task(label, total=None)
        return work(lambda done, total: bar.update(task, completed=done, total=total))


def obtain_model(plan: ModelPlan, confirm: Callable[[str], bool], console: Console) -> Check:
    """Download / verify as the plan says; the returned check tells how it went."""
    if plan.problem:
        return plan.problem
    if plan.source == "local":
        return Check("model", "pass", str(plan.target), "local file (not checked against the hub)")
    if plan.source in ("configured", "downloaded"):
        verified = dl.recorded_sha256(plan.target) is not None
        detail = "verified earlier (size and SHA-256)" if verified else "the configured model file"
        return Check("model", "pass", str(plan.target), detail)
    assert plan.remote is not None
    if plan.target.is_file():
        return _verify_existing(plan.target, plan.remote, console)
    size = gib(plan.remote.size)
    if not confirm(f"Download {_hub_name()} ({size}) to {plan.target.parent}?"):
        return Check("model", "fail", _hub_name(), "download declined", "pass --model PATH instead")
    remote = plan.remote
    try:
        _with_bar(console, dl.MODEL_FILE, lambda hook: dl.download(remote, plan.target, hook))
    except dl.DiskFullError as exc:
        return Check("model", "fail", "disk full", str(exc), "free disk space, then rerun setup")
    except dl.DownloadError as exc:
        return Check("model", "fail", _hub_name(), str(exc), "rerun setup to resume")
    detail = (
        "downloaded; size and SHA-256 match the hub"
        if remote.sha256
        else "downloaded; size matches (the hub gave no SHA-256)"
    )
    return Check("model", "pass", str(plan.target), detail)


def _verify_existing(target: Path, remote: dl.RemoteFile, console: Console) -> Check:
    """A file with the model's name that setup has no record of: hash it, never replace it."""
    sha = _with_bar(console, "verifying", lambda hook: dl.sha256_file(target, hook))
    if target.stat().st_size == remote.size and sha == (remote.sha256 or sha):
        dl.record_verified(target, sha)
        return Check("model", "pass", str(target), "existing file matches the hub (SHA-256)")
    return Check(
        "model", "fail", str(target),
        f"{target.name} is already there but differs from the hub's file; it was left untouched",
        "move it away or pass it with --model PATH",
    )  # fmt: skip
