"""The engine panel (like `openjet top`): which engine serves and why, model, VRAM, KV pool,
draft acceptance, per-slot and per-agent tok/s, and a sparkline of the aggregate tok/s.

It polls `GET /v1/slots` once a second in an exclusive worker. Endpoints that are not an
OpenJet engine have no such route; then the panel shows the agents' own tok/s only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import httpx
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Sparkline, Static

from tui.engine_monitor import NOT_OURS, EngineMonitor, EngineReading, EngineStats, is_local
from tui.formatting import format_bytes, format_count, format_percent, format_rate

POLL_INTERVAL_S = 1.0
FOREIGN_POLL_INTERVAL_S = 30.0  # a local server that is not ours: check now and then


@dataclass
class AgentRate:
    """What the workspace tells the panel about one agent."""

    label: str
    tokens_per_second: float
    busy: bool


class EnginePanel(VerticalScroll):
    """Polls the engine and shows its state; `set_agents` feeds the per-agent lines."""

    def __init__(self, endpoint: str, fallback_reason: str = "", poll: bool = True) -> None:
        super().__init__(id="engine-panel")
        self.monitor = EngineMonitor(endpoint)
        self.fallback_reason = fallback_reason  # from setup, when /v1/slots gives none
        self.reading: EngineReading | None = None
        self.agents: list[AgentRate] = []
        self.pending_approvals = 0
        self._poll = poll and is_local(endpoint)
        self._client: httpx.AsyncClient | None = None
        self._next_poll = 0.0

    def compose(self) -> ComposeResult:
        yield Static(classes="engine-info")
        yield Static("aggregate tok/s (last 60 s)", classes="caption")
        yield Sparkline(list(self.monitor.history), summary_function=max)
        yield Static(classes="engine-rates")

    def on_mount(self) -> None:
        self.border_title = "Engine"
        self.render_reading()
        if self._poll:
            self._client = httpx.AsyncClient()
            self.set_interval(POLL_INTERVAL_S, self.poll)
            self.poll()

    async def on_unmount(self) -> None:
        if self._client is not None:
            await self._client.aclose()

    def poll(self) -> None:
        if time.monotonic() < self._next_poll:
            return
        self.run_worker(self._poll_once(), group="engine-monitor", exclusive=True)

    async def _poll_once(self) -> None:
        if self._client is None:
            return
        reading = await self.monitor.poll(self._client)
        if reading.stats is None and reading.problem == NOT_OURS:
            self._next_poll = time.monotonic() + FOREIGN_POLL_INTERVAL_S
        self.show_reading(reading)

    def show_reading(self, reading: EngineReading) -> None:
        """Take one poll result (tests call this with fixed readings)."""
        self.reading = reading
        if reading.stats is not None:
            aggregate = reading.stats.tokens_per_second
        else:
            aggregate = sum(agent.tokens_per_second for agent in self.agents if agent.busy)
        self.monitor.record(aggregate)
        self.query_one(Sparkline).data = list(self.monitor.history)
        self.render_reading()

    def set_agents(self, agents: list[AgentRate], pending_approvals: int) -> None:
        self.agents = agents
        self.pending_approvals = pending_approvals
        self.render_reading()

    def render_reading(self) -> None:
        stats = self.reading.stats if self.reading else None
        info = self._engine_info(stats) if stats else self._no_stats()
        self.query_one(".engine-info", Static).update(info)
        self.query_one(".engine-rates", Static).update(self._rates(stats))

    def _engine_info(self, stats: EngineStats) -> Table:
        table = Table.grid(padding=(0, 1))
        table.add_column(style="dim")
        table.add_column()
        table.add_row("engine", Text(stats.kind, style="bold"))
        reason = stats.fallback_reason or self.fallback_reason
        if reason:
            table.add_row("why", Text(reason, style="yellow"))
        table.add_row("model", stats.model or "?")
        if stats.vram_total_bytes:
            table.add_row(
                "VRAM",
                f"{format_bytes(stats.vram_used_bytes)} / {format_bytes(stats.vram_total_bytes)}",
            )
        pool = stats.kv_pool_used / stats.kv_pool_tokens if stats.kv_pool_tokens else None
        table.add_row(
            "KV pool",
            f"{format_count(stats.kv_pool_used)} / {format_count(stats.kv_pool_tokens)} ({format_percent(pool)})",
        )
        table.add_row(
            "drafts",
            f"{format_percent(stats.draft_acceptance)} accepted "
            f"({stats.drafts_accepted}/{stats.drafts_proposed})",
        )
        table.add_row("total", Text(format_rate(stats.tokens_per_second), style="bold"))
        table.add_row("queued", str(stats.queued))
        table.add_row("approvals", self._pending_text())
        return table

    def _no_stats(self) -> Table:
        table = Table.grid(padding=(0, 1))
        table.add_column(style="dim")
        table.add_column()
        table.add_row("endpoint", self.monitor.endpoint)
        if self.reading:
            problem = self.reading.problem
        elif is_local(self.monitor.endpoint):
            problem = "waiting for the first poll"
        else:
            problem = "remote endpoint (not polled)"
        table.add_row("stats", Text(problem or "", style="yellow"))
        if self.fallback_reason:
            table.add_row("why", Text(self.fallback_reason, style="yellow"))
        total = sum(agent.tokens_per_second for agent in self.agents if agent.busy)
        table.add_row("total", Text(format_rate(total), style="bold"))
        table.add_row("approvals", self._pending_text())
        return table

    def _pending_text(self) -> Text:
        count = self.pending_approvals
        return Text(
            f"{count} pending (ctrl+o)" if count else "none", "bold yellow" if count else ""
        )

    def _rates(self, stats: EngineStats | None) -> Table:
        table = Table.grid(padding=(0, 1), expand=True)
        table.add_column(no_wrap=True, overflow="ellipsis", ratio=1)
        table.add_column(justify="right", no_wrap=True)
        for agent in self.agents:
            mark = "●" if agent.busy else "○"
            table.add_row(f"{mark} {agent.label}", format_rate(agent.tokens_per_second))
        for slot in stats.slots if stats else ():
            table.add_row(
                Text(f"slot {slot.id} {slot.state} {format_count(slot.context_used)}", style="dim"),
                Text(format_rate(slot.tokens_per_second), style="dim"),
            )
        return table
