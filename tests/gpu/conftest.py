"""GPU tests share the machine's kernel cache.

A compiled module is a pure function of its source, options, architecture and NVRTC version
(engine/cuda/build.cache_key names its file), so every test and every pytest-xdist worker can
reuse one build, and the cubins that bench/prebuild_kernels.py carries to the device are found.
Under the per-test OPENJET_HOME of tests/conftest.py each worker compiled every module it used
again (about a minute of one core per product module), so a bit test over five MatmulConfig
settings ran out its device call's time building them (bench/NOTES.md v41d)."""

from __future__ import annotations

from pathlib import Path

import pytest

from openjet import paths
from tests.conftest import REAL_CACHE_DIR


@pytest.fixture(autouse=True)
def shared_kernel_cache(monkeypatch: pytest.MonkeyPatch, openjet_home: Path) -> Path:
    from engine.cuda import build

    path = REAL_CACHE_DIR / "kernels"
    monkeypatch.setattr(build, "kernel_cache_dir", lambda: paths.ensure_dir(path))
    return path
