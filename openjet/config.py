"""The one TOML config file: a typed schema, validated loading, and safe edits.

Every known key is declared once in `SCHEMA` with its type, default and allowed values; named
model profiles live under `[profiles.NAME]` with the fields of `PROFILE_FIELDS`. A bad value or
an unknown key raises `ConfigError` naming the key, the value and the file; a failed edit never
touches the file (writes go to a temporary file that replaces the original only when complete).
"""

from __future__ import annotations

import os
import tempfile
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import tomlkit

from openjet import paths

Value = str | int | float | bool | list[str]


class ConfigError(ValueError):
    """A config problem, with the key, the value and the file it concerns in its message."""


@dataclass(frozen=True)
class Setting:
    """One config key: its type, default, and what values it accepts."""

    type: type
    default: Value
    help: str
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    check: Callable[[Any], str | None] | None = None  # returns a problem, or None when fine


def _check_url(value: Any) -> str | None:
    if value == "":
        return None
    parsed = urlparse(str(value))
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        return "expected an http(s) URL such as http://127.0.0.1:18080/v1"
    return None


ENGINE_KINDS = ("", "megakernel", "reference", "llama-server")
APPROVAL_MODES = ("never", "ask", "auto-edits", "all")

SCHEMA: dict[str, Setting] = {
    "engine.kind": Setting(str, "", "engine chosen by setup", ENGINE_KINDS),
    "engine.fallback_reason": Setting(str, "", "why setup fell back to llama-server"),
    "engine.model_path": Setting(str, "", "GGUF file the engine serves"),
    "engine.host": Setting(str, "127.0.0.1", "address the engine server binds"),
    "engine.port": Setting(int, 18080, "port of the engine server", minimum=1, maximum=65535),
    "engine.slots": Setting(int, 4, "parallel agent slots", minimum=1, maximum=8),
    "engine.context_size": Setting(int, 131072, "KV pool size in tokens", minimum=256),
    "engine.n_draft": Setting(int, 2, "speculative draft tokens per slot", minimum=0, maximum=4),
    "engine.speculation": Setting(
        str, "mtp", "draft source", ("off", "mtp", "lookup", "mtp+lookup")
    ),
    "engine.checkpoint_interval": Setting(
        int, 2048, "tokens between DeltaNet state checkpoints", minimum=64
    ),
    "engine.llama_server_path": Setting(str, "", "llama-server binary used by the fallback"),
    "agent.approval": Setting(str, "ask", "default approval mode", APPROVAL_MODES),
    "agent.max_steps": Setting(int, 50, "tool-call steps per turn", minimum=1, maximum=10000),
    "agent.allow_commands": Setting(list, [], "command prefixes that run without asking"),
    "agent.profile": Setting(str, "local", "model profile agents use by default"),
    "agent.shell_timeout": Setting(int, 120, "seconds before a command is killed", minimum=1),
    "agent.max_tokens": Setting(int, 0, "most tokens per model reply (0: no limit)", minimum=0),
    "slipstream.profile": Setting(str, "openrouter", "profile of the orchestrator model"),
    "slipstream.model": Setting(str, "", "orchestrator model name"),
    "slipstream.timeout_s": Setting(int, 180, "seconds to wait for the orchestrator", minimum=1),
    "slipstream.max_wait_s": Setting(int, 60, "longest Retry-After wait on 429", minimum=0),
    "airgapped": Setting(bool, False, "refuse every non-loopback endpoint"),
    "tui.theme": Setting(str, "textual-dark", "Textual theme"),
}

PROFILE_FIELDS: dict[str, Setting] = {
    "endpoint": Setting(str, "", "OpenAI-compatible base URL", check=_check_url),
    "model": Setting(str, "", "model name sent to the endpoint"),
    "context_size": Setting(int, 32768, "context window in tokens", minimum=256),
}


def _setting_for(key: str) -> Setting | None:
    if key in SCHEMA:
        return SCHEMA[key]
    parts = key.split(".")
    if len(parts) == 3 and parts[0] == "profiles" and parts[1]:
        return PROFILE_FIELDS.get(parts[2])
    return None


def _validate(key: str, value: Any, setting: Setting, where: Path) -> Value:
    def fail(problem: str) -> ConfigError:
        return ConfigError(f"{where}: {key} = {value!r}: {problem}")

    if setting.type is bool:
        if not isinstance(value, bool):
            raise fail("expected true or false")
    elif setting.type is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise fail("expected a whole number")
    elif setting.type is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise fail("expected a number")
    elif setting.type is list:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise fail("expected a list of strings")
    elif not isinstance(value, str):
        raise fail("expected a string")
    if setting.choices and value not in setting.choices:
        raise fail("expected one of " + ", ".join(repr(c) for c in setting.choices))
    if setting.minimum is not None and value < setting.minimum:
        raise fail(f"must be at least {setting.minimum:g}")
    if setting.maximum is not None and value > setting.maximum:
        raise fail(f"must be at most {setting.maximum:g}")
    if setting.check and (problem := setting.check(value)):
        raise fail(problem)
    return value


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for name, value in table.items():
        key = f"{prefix}{name}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, key + "."))
        else:
            flat[key] = value
    return flat


@dataclass
class Config:
    """The validated contents of the config file, with defaults for what it leaves out."""

    path: Path
    values: dict[str, Value] = field(default_factory=dict)

    def get(self, key: str) -> Any:
        if key in self.values:
            return self.values[key]
        setting = _setting_for(key)
        if setting is None:
            raise KeyError(key)
        return setting.default

    def profiles(self) -> dict[str, dict[str, Any]]:
        """Named profiles, each with every field filled (defaults where the file is silent)."""
        names = {k.split(".")[1] for k in self.values if k.startswith("profiles.")}
        return {
            name: {f: self.get(f"profiles.{name}.{f}") for f in PROFILE_FIELDS} for name in names
        }

    def as_dict(self) -> dict[str, Value]:
        """Every known key with its effective value, profiles included."""
        merged: dict[str, Value] = {k: s.default for k, s in SCHEMA.items()}
        merged.update(self.values)
        return dict(sorted(merged.items()))

    @property
    def is_configured(self) -> bool:
        """True once setup has chosen an engine."""
        return bool(self.get("engine.kind"))


def _read_document(path: Path) -> tomlkit.TOMLDocument:
    if not path.exists():
        return tomlkit.document()
    try:
        text = path.read_text(encoding="utf-8")
        tomllib.loads(text)  # stricter parser; gives line and column on errors
        return tomlkit.parse(text)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc


def load_config(path: Path | None = None) -> Config:
    """Read and validate the config file; a missing file gives all defaults."""
    path = path or paths.config_file()
    document = _read_document(path)
    values: dict[str, Value] = {}
    for key, value in _flatten(document.unwrap()).items():
        setting = _setting_for(key)
        if setting is None:
            raise ConfigError(f"{path}: unknown key {key!r} (value {value!r})")
        values[key] = _validate(key, value, setting, path)
    return Config(path=path, values=values)


def parse_value(key: str, raw: str, path: Path | None = None) -> Value:
    """Turn the text a person typed (`openjet config set KEY VALUE`) into a typed value."""
    where = path or paths.config_file()
    setting = _setting_for(key)
    if setting is None:
        raise ConfigError(f"{where}: unknown key {key!r} (value {raw!r})")
    value: Any = raw
    if setting.type is bool:
        lowered = raw.strip().lower()
        value = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}.get(
            lowered, raw
        )
    elif setting.type is int:
        try:
            value = int(raw)
        except ValueError:
            value = raw
    elif setting.type is float:
        try:
            value = float(raw)
        except ValueError:
            value = raw
    elif setting.type is list:
        value = [item.strip() for item in raw.split(",") if item.strip()]
    return _validate(key, value, setting, where)


def _atomic_write(path: Path, text: str) -> None:
    paths.ensure_dir(path.parent)
    handle, temp_name = tempfile.mkstemp(prefix=".config-", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp_name, path)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise


def update_values(updates: Mapping[str, Value], path: Path | None = None) -> Config:
    """Validate every update first, then write them all at once (or none at all)."""
    path = path or paths.config_file()
    load_config(path)  # refuse to edit a file that is already broken
    checked = {key: _validate(key, v, _require(key, v, path), path) for key, v in updates.items()}
    document = _read_document(path)
    for key, value in checked.items():
        table: Any = document
        *parents, leaf = key.split(".")
        for part in parents:
            if part not in table:
                table[part] = tomlkit.table()
            table = table[part]
        table[leaf] = value
    _atomic_write(path, tomlkit.dumps(document))
    return load_config(path)


def _require(key: str, value: Any, path: Path) -> Setting:
    setting = _setting_for(key)
    if setting is None:
        raise ConfigError(f"{path}: unknown key {key!r} (value {value!r})")
    return setting


def set_value(key: str, raw: str, path: Path | None = None) -> Config:
    """`openjet config set KEY VALUE`: parse, validate, write."""
    path = path or paths.config_file()
    return update_values({key: parse_value(key, raw, path)}, path)
