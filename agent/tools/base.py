"""The shapes every tool shares: its spec (JSON schema the model sees), its context, and a
prepared call.

A tool call runs in two phases so approvals can show exactly what will happen: `prepare`
validates the arguments, confines paths and computes the diff or command *without touching
anything*; the loop asks for approval when needed; then `PreparedCall.run` does the work.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from agent.tools.workspace import FileTracker, ToolError, Workspace

ToolKind = Literal["read", "edit", "shell"]


@dataclass
class ToolContext:
    """What a tool may use: the workspace, the agent's file tracker, limits."""

    workspace: Workspace
    tracker: FileTracker = field(default_factory=FileTracker)
    shell_timeout_s: float = 120.0
    output_cap_chars: int = 30_000
    airgapped: bool = False  # commands run with no network at all (config `airgapped`)


@dataclass(frozen=True)
class ToolOutput:
    text: str
    diff: str | None = None


@dataclass
class PreparedCall:
    """A validated call, ready to run once approved."""

    name: str
    kind: ToolKind
    summary: str
    run: Callable[[], Awaitable[ToolOutput]]
    path: str | None = None
    diff: str | None = None
    command: str | None = None


Preparer = Callable[[ToolContext, dict[str, Any]], PreparedCall]


@dataclass(frozen=True)
class ToolSpec:
    name: str
    kind: ToolKind
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments object
    prepare: Preparer

    def schema(self) -> dict[str, Any]:
        """The OpenAI `tools` entry."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "boolean": (bool,),
    "number": (int, float),
}


def check_arguments(spec: ToolSpec, args: dict[str, Any]) -> dict[str, Any]:
    """Validate `args` against the spec's schema: required keys, known keys, simple types."""
    properties: dict[str, Any] = spec.parameters.get("properties", {})
    missing = [k for k in spec.parameters.get("required", []) if k not in args]
    if missing:
        raise ToolError(f"{spec.name}: missing argument(s) {', '.join(missing)}")
    unknown = [k for k in args if k not in properties]
    if unknown:
        raise ToolError(
            f"{spec.name}: unknown argument(s) {', '.join(unknown)}; "
            f"it takes {', '.join(properties)}"
        )
    for key, value in args.items():
        expected = properties[key].get("type")
        allowed = _JSON_TYPES.get(expected, (object,))
        wrong_bool = isinstance(value, bool) and expected in ("integer", "number")
        if value is not None and (not isinstance(value, allowed) or wrong_bool):
            raise ToolError(f"{spec.name}: argument {key} must be a {expected}, got {value!r}")
    return args


def obj(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """A JSON schema for an arguments object."""
    return {"type": "object", "properties": properties, "required": required}


def prop(kind: str, description: str) -> dict[str, Any]:
    return {"type": kind, "description": description}
