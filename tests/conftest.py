"""Suite-wide pytest setup: an isolated OPENJET_HOME per test, the `gpu` marker, and the
"no tests collected" exit code treated as success (CI runs the suite on CPU-only machines).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from openjet import paths

# Fixtures shared across folders (`memory_keyring`: no test touches the real keyring).
pytest_plugins = ["tests.support.memory_keyring"]

# The user's real cache (llama.cpp build, compiled kernels) is shared across test runs so the
# slow builds happen once per machine; everything else a test writes goes to a temporary home.
REAL_CACHE_DIR: Path = Path(os.environ.get("OPENJET_TEST_CACHE", str(paths.cache_dir())))


def cuda_device_usable() -> bool:
    try:
        import cupy

        return bool(cupy.cuda.runtime.getDeviceCount() > 0)
    except Exception:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if cuda_device_usable():
        return
    skip_gpu = pytest.mark.skip(reason="no usable CUDA device (CuPy missing or no GPU)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.OK


@pytest.fixture(autouse=True)
def openjet_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Each test gets its own config, data and cache folders."""
    home = tmp_path / "openjet-home"
    monkeypatch.setenv("OPENJET_HOME", str(home))
    yield home
