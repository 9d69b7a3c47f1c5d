"""Slash commands typed in an agent's input box: the table of commands, parsing and completion.

Headless (no textual): the pane parses what the person typed into a `SlashCommand`, and the
input box asks `complete` for the inline suggestion. Bad input gives a `SlashError` whose
message says what is wrong and what is expected, shown to the person as a notification.
"""

from __future__ import annotations

from dataclasses import dataclass

APPROVAL_MODES = ("never", "ask", "auto-edits", "all")
AGENT_MODES = ("normal", "slipstream")


@dataclass(frozen=True)
class CommandSpec:
    """One slash command: its name, the argument it takes (if any) and what it does."""

    name: str
    argument: str  # placeholder shown in the usage, '' for commands without an argument
    help: str
    choices: tuple[str, ...] = ()  # allowed arguments; empty = free text
    needs_argument: bool = False

    @property
    def usage(self) -> str:
        return f"/{self.name} {self.argument}".rstrip()


COMMANDS: tuple[CommandSpec, ...] = (
    CommandSpec("new", "[TASK]", "open a new agent (optionally with its first task)"),
    CommandSpec("resume", "[SEARCH]", "resume a saved session from the picker"),
    CommandSpec(
        "approve",
        "never|ask|auto-edits|all",
        "set this agent's approval mode",
        APPROVAL_MODES,
        needs_argument=True,
    ),
    CommandSpec("model", "[PROFILE]", "show the model, or move this agent and new ones to PROFILE"),
    CommandSpec(
        "mode",
        "normal|slipstream",
        "switch between the local model and Slipstream",
        AGENT_MODES,
        needs_argument=True,
    ),
    CommandSpec("compact", "", "condense this agent's older turns to free context"),
    CommandSpec("clear", "", "start this agent's conversation afresh"),
    CommandSpec("help", "", "show every command and shortcut"),
    CommandSpec("quit", "", "quit OpenJet (sessions are saved)"),
)
BY_NAME: dict[str, CommandSpec] = {spec.name: spec for spec in COMMANDS}


class SlashError(ValueError):
    """What the person typed is not a valid slash command; the message says why."""


@dataclass(frozen=True)
class SlashCommand:
    """A parsed command: `name` without the slash, `argument` stripped ('' when none)."""

    name: str
    argument: str = ""


def is_slash(text: str) -> bool:
    return text.lstrip().startswith("/")


def parse(text: str) -> SlashCommand:
    """Parse `/name [argument]`; raise SlashError for unknown names or bad arguments."""
    body = text.strip()[1:]
    name, _, argument = body.partition(" ")
    name, argument = name.strip().lower(), argument.strip()
    spec = BY_NAME.get(name)
    if spec is None:
        known = ", ".join(f"/{s.name}" for s in COMMANDS)
        raise SlashError(f"unknown command /{name or ''}; known commands: {known}")
    if spec.needs_argument and not argument:
        raise SlashError(f"/{name} needs an argument: {spec.usage}")
    if spec.choices and argument not in spec.choices:
        raise SlashError(f"/{name}: {argument!r} is not one of {', '.join(spec.choices)}")
    if not spec.argument and argument:
        raise SlashError(f"/{name} takes no argument: {spec.usage}")
    return SlashCommand(name, argument)


def candidates(text: str) -> list[str]:
    """Every full completion of `text` (commands, then their fixed arguments), in table order."""
    if not is_slash(text):
        return []
    body = text.lstrip()[1:]
    if " " not in body:
        return [f"/{spec.name}" for spec in COMMANDS if spec.name.startswith(body.lower())]
    name, _, argument = body.partition(" ")
    spec = BY_NAME.get(name.lower())
    if spec is None:
        return []
    return [f"/{spec.name} {choice}" for choice in spec.choices if choice.startswith(argument)]


def complete(text: str) -> str | None:
    """The inline suggestion for `text`: the first candidate that extends it, or None."""
    for candidate in candidates(text):
        if candidate != text.lstrip() and candidate.startswith(text.lstrip()):
            return candidate
    return None


def hint(text: str) -> str:
    """One line under the input: usage and help of every command matching what is typed."""
    body = text.lstrip()[1:]
    name = body.partition(" ")[0].lower()
    matches = [s for s in COMMANDS if s.name.startswith(name)] if " " not in body else []
    if " " in body and name in BY_NAME:
        matches = [BY_NAME[name]]
    return "   ".join(f"{s.usage} — {s.help}" for s in matches) or "no such command; /help"
