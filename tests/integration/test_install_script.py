"""install.sh on this machine: the plan it picks, and its clear refusals."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INSTALL = ROOT / "install.sh"


def make_fake_bin(tmp_path: Path, scripts: dict[str, str]) -> Path:
    """A PATH folder holding the few tools install.sh needs plus the given fake programs."""
    fake = tmp_path / "bin"
    fake.mkdir()
    for tool in (
        "dirname",
        "sed",
        "cat",
        "cksum",
        "mkdir",
        "head",
        "date",
        "ln",
        "git",
        "bash",
        "env",
    ):
        real = shutil.which(tool)
        if real:
            (fake / tool).symlink_to(real)
    for name, body in scripts.items():
        path = fake / name
        path.write_text("#!/bin/bash\n" + body)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return fake


def run_install(
    args: list[str], env_extra: dict[str, str], path: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENJET_PYTHON",)}
    env.update(env_extra)
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        ["/bin/bash", str(INSTALL), *args], capture_output=True, text=True, env=env, timeout=600
    )


def python_311_plus() -> str:
    """The real interpreter behind this venv (not a shim script that needs a full PATH)."""
    real = (
        Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    )
    return str(real.resolve())


def test_plan_without_driver_has_no_cupy(tmp_path: Path) -> None:
    fake = make_fake_bin(tmp_path, {})
    (fake / "python3").symlink_to(python_311_plus())
    result = run_install(
        ["--dry-run", "--venv", str(tmp_path / "v")], {"HOME": str(tmp_path)}, str(fake)
    )
    assert result.returncode == 0, result.stderr
    assert "no NVIDIA driver found" in result.stdout
    assert "extras=none" in result.stdout


@pytest.mark.parametrize(("cuda", "extra"), [("12.4", "cuda12"), ("13.0", "cuda13")])
def test_plan_matches_driver_cuda_major(tmp_path: Path, cuda: str, extra: str) -> None:
    smi = f'echo "| NVIDIA-SMI 580.00   Driver Version: 580.00   CUDA Version: {cuda}     |"\n'
    fake = make_fake_bin(tmp_path, {"nvidia-smi": smi})
    (fake / "python3").symlink_to(python_311_plus())
    result = run_install(
        ["--dry-run"], {"HOME": str(tmp_path), "OPENJET_HOME": str(tmp_path / "oj")}, str(fake)
    )
    assert result.returncode == 0, result.stderr
    assert f"extras={extra}" in result.stdout
    assert f"venv={tmp_path / 'oj' / 'data' / 'venv'}" in result.stdout


def test_dev_plan_uses_checkout_venv() -> None:
    result = run_install(["--dev", "--dry-run"], {})
    assert result.returncode == 0, result.stderr
    assert f"venv={ROOT / '.venv'}" in result.stdout and "extras=dev" in result.stdout


def test_refuses_old_python(tmp_path: Path) -> None:
    old = 'if [ "$1" = "--version" ]; then echo "Python 3.9.2"; exit 0; fi\nexit 1\n'
    fake = make_fake_bin(tmp_path, {"python3": old})
    result = run_install(["--dry-run"], {"HOME": str(tmp_path)}, str(fake))
    assert result.returncode == 1
    assert "needs Python 3.11 or newer" in result.stderr and "3.9.2" in result.stderr


def test_refuses_missing_python(tmp_path: Path) -> None:
    fake = make_fake_bin(tmp_path, {})
    result = run_install(["--dry-run"], {"HOME": str(tmp_path)}, str(fake))
    assert result.returncode == 1
    assert "no Python found" in result.stderr


def test_unreachable_index_is_a_clear_error(tmp_path: Path) -> None:
    env = {
        "HOME": str(tmp_path),
        "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
        "PIP_FIND_LINKS": "",
    }
    result = run_install(["--venv", str(tmp_path / "venv")], env)
    assert result.returncode == 1
    assert "cannot be reached" in result.stderr and "127.0.0.1:9" in result.stderr
    assert not (tmp_path / ".local" / "bin" / "openjet").exists()


def test_dev_install_is_idempotent() -> None:
    first = run_install(["--dev"], {})  # a no-op already, unless pyproject.toml just changed
    assert first.returncode == 0, first.stderr
    second = run_install(["--dev"], {})
    assert second.returncode == 0, second.stderr
    assert "nothing to install" in second.stdout


@pytest.mark.slow
def test_user_install_puts_openjet_on_path(tmp_path: Path) -> None:
    """A real user install into a fresh venv; rerunning it installs nothing more."""
    venv = tmp_path / "venv"
    first = run_install(["--venv", str(venv)], {"HOME": str(tmp_path)})
    assert first.returncode == 0, first.stdout + first.stderr
    link = tmp_path / ".local" / "bin" / "openjet"
    assert link.is_symlink() and link.resolve() == (venv / "bin" / "openjet").resolve()
    assert "is not on your PATH" in first.stdout
    version = subprocess.run([str(link), "--version"], capture_output=True, text=True, timeout=120)
    assert version.returncode == 0 and version.stdout.startswith("openjet ")
    again = run_install(["--venv", str(venv)], {"HOME": str(tmp_path)})
    assert again.returncode == 0 and "nothing to install" in again.stdout
