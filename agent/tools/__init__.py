"""The agent's tools: one module per family, one registry here.

`TOOL_SCHEMAS` is the stable list the model sees (same order every request, so the prompt prefix
stays cacheable); `prepare_call` validates a call and returns a `PreparedCall` that runs after
approval. Errors the model can act on are `ToolError`s; their message is the tool result.
"""

from __future__ import annotations

from typing import Any

from agent.tools import files, search, shell
from agent.tools.base import (
    PreparedCall,
    ToolContext,
    ToolKind,
    ToolOutput,
    ToolSpec,
    check_arguments,
)
from agent.tools.workspace import FileTracker, ToolError, Workspace

SPECS: dict[str, ToolSpec] = {
    spec.name: spec for spec in (*files.SPECS, *search.SPECS, *shell.SPECS)
}
TOOL_SCHEMAS: list[dict[str, Any]] = [spec.schema() for spec in SPECS.values()]


def prepare_call(ctx: ToolContext, name: str, args: dict[str, Any]) -> PreparedCall:
    """Validate one call; raises ToolError for unknown tools, bad arguments or paths."""
    spec = SPECS.get(name)
    if spec is None:
        raise ToolError(f"there is no tool named {name!r}; the tools are {', '.join(SPECS)}")
    if not isinstance(args, dict):
        raise ToolError(f"{name}: arguments must be a JSON object")
    return spec.prepare(ctx, check_arguments(spec, args))


__all__ = [
    "SPECS",
    "TOOL_SCHEMAS",
    "FileTracker",
    "PreparedCall",
    "ToolContext",
    "ToolError",
    "ToolKind",
    "ToolOutput",
    "Workspace",
    "prepare_call",
]
