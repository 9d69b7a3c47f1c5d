"""Where OpenJet keeps its config, data (sessions) and cache (models, builds).

`OPENJET_HOME` moves all three under one folder (tests set it); otherwise the platform's
user directories from platformdirs are used.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP_NAME = "openjet"
CONFIG_FILE_NAME = "config.toml"


def _home() -> Path | None:
    value = os.environ.get("OPENJET_HOME")
    return Path(value).expanduser() if value else None


def config_dir() -> Path:
    home = _home()
    return home / "config" if home else Path(platformdirs.user_config_dir(APP_NAME))


def data_dir() -> Path:
    home = _home()
    return home / "data" if home else Path(platformdirs.user_data_dir(APP_NAME))


def cache_dir() -> Path:
    home = _home()
    return home / "cache" if home else Path(platformdirs.user_cache_dir(APP_NAME))


def config_file() -> Path:
    return config_dir() / CONFIG_FILE_NAME


def ensure_dir(path: Path) -> Path:
    """Create `path` (and parents) when missing and return it."""
    path.mkdir(parents=True, exist_ok=True)
    return path
