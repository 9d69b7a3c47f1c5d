"""Approval policy per agent: which tool calls run, which ask a person, which are refused.

Modes: `never` (read-only: edits and commands are refused), `ask` (every edit and command asks,
except commands on the allow-list), `auto-edits` (edits run, commands ask unless allow-listed),
`all` (everything runs). Workspace confinement is enforced by the tools themselves in every mode.

The allow-list of command prefixes has three sources: the config's `agent.allow_commands`, the
agent's own additions (ALLOW_PREFIX_AGENT, kept with its session), and the project's additions
(ALLOW_PREFIX_PROJECT). Project prefixes are stored in the session database keyed by the
workspace's real path — deliberately *not* in a file inside the workspace, because the agent can
write workspace files and must never be able to grant itself permissions. A prefix matches
whole words (`git status` allows `git status -s`, not `git statusx`), and never a command with
shell control characters (`;`, `&`, `|`, redirections, substitutions, newlines), so
`git status; rm -rf ~` cannot ride on an allowed prefix.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from agent.tools import PreparedCall

MODES = ("never", "ask", "auto-edits", "all")
SHELL_CONTROL = re.compile(r"[;&|<>`\n\r]|\$\(")
# Commands whose second word picks what they do, so the suggested prefix keeps it.
SUBCOMMAND_TOOLS = frozenset(
    {
        "git",
        "npm",
        "pnpm",
        "yarn",
        "cargo",
        "go",
        "uv",
        "pip",
        "python",
        "python3",
        "make",
        "docker",
    }
)


@dataclass(frozen=True)
class Verdict:
    action: Literal["allow", "ask", "deny"]
    reason: str = ""


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"approval mode {mode!r} is not one of {', '.join(MODES)}")
    return mode


def _words(text: str) -> list[str] | None:
    try:
        return shlex.split(text)
    except ValueError:
        return None


def prefix_allows(prefix: str, command: str) -> bool:
    """True when `command` is a plain command whose first words are `prefix`'s words."""
    if SHELL_CONTROL.search(command):
        return False
    words, wanted = _words(command), _words(prefix)
    return bool(words and wanted) and words[: len(wanted)] == wanted  # type: ignore[index, arg-type]


def suggest_prefix(command: str) -> str:
    """The prefix an "allow commands like this" answer means: the program, plus its subcommand."""
    words = _words(command) or command.split()
    if not words:
        return command.strip()
    if len(words) > 1 and words[0] in SUBCOMMAND_TOOLS and not words[1].startswith("-"):
        return shlex.join(words[:2])
    return shlex.join(words[:1])


class ApprovalPolicy:
    """Decides each prepared tool call for one agent."""

    def __init__(
        self,
        mode: str,
        config_prefixes: Iterable[str] = (),
        agent_prefixes: Iterable[str] = (),
        project_prefixes: Callable[[], list[str]] = list,
    ) -> None:
        self.mode = check_mode(mode)
        self.config_prefixes = list(config_prefixes)
        self.agent_prefixes = list(agent_prefixes)
        self._project_prefixes = project_prefixes

    def allow_for_agent(self, prefix: str) -> None:
        if prefix and prefix not in self.agent_prefixes:
            self.agent_prefixes.append(prefix)

    def allowed_prefixes(self) -> list[str]:
        return [*self.config_prefixes, *self._project_prefixes(), *self.agent_prefixes]

    def command_allowed(self, command: str) -> bool:
        return any(prefix_allows(p, command) for p in self.allowed_prefixes())

    def check(self, call: PreparedCall) -> Verdict:
        if call.kind == "read" or self.mode == "all":
            return Verdict("allow")
        if self.mode == "never":
            return Verdict(
                "deny",
                f"{call.name} is not allowed: this agent is read-only (approval mode 'never'); "
                "answer with what you found or what you would change instead",
            )
        if call.kind == "edit":
            return Verdict("allow") if self.mode == "auto-edits" else Verdict("ask")
        if call.command is not None and self.command_allowed(call.command):
            return Verdict("allow", "on the allow-list")
        return Verdict("ask")
