"""Slipstream: a cloud model plans and reviews, local worker agents implement.

`Slipstream(manager).start(spec)` opens a Slipstream session (a row in the session store whose
messages are the conversation with the orchestrator) and returns a `SlipstreamRun`; iterating
`run.run()` drives it: the orchestrator gets the task and a bounded repository summary and
returns a plan; each step runs as a local worker agent (full tools, the person's approvals);
the worker's concise report (its answer, the diff stat and diff, the commands and their exit
codes) goes to the orchestrator, which accepts, asks for a revision (the same worker continues
with the feedback) or re-plans; a final review closes the task. The worker's transcript — tool
outputs, files it read — never leaves this machine.

Every exchange and decision is stored before it is acted on, so `Slipstream(manager).resume(id)`
continues at the step it stopped. When the orchestrator times out, rate-limits beyond the
bounded wait, or answers garbage twice, the person is told (`CloudFailed`) and the local side
finishes the plan alone.

Modules: `slipstream_run` (the flow), `slipstream_session` (bookkeeping, the orchestrator
conversation), `slipstream_cloud` (the HTTP client), `slipstream_protocol` (the JSON replies),
`slipstream_worker` (reports), `slipstream_workspace` (summary, snapshots, diffs),
`slipstream_state` (replay for resume), `slipstream_events` (events and accounting).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from agent.api import AgentManager
from agent.approvals import check_mode
from agent.profiles import Profile, ProfileError, is_loopback, load_key, resolve_profile
from agent.slipstream_run import SlipstreamRun
from agent.slipstream_state import RunState

__all__ = ["Slipstream", "SlipstreamRun", "SlipstreamSpec", "resolve_orchestrator"]


@dataclass(frozen=True)
class SlipstreamSpec:
    """A new Slipstream task. Unset orchestrator fields come from `slipstream.*` in the config,
    unset worker fields from the agent defaults (`agent.profile`, `agent.approval`)."""

    workdir: Path
    task: str
    orchestrator_profile: str | None = None
    orchestrator_endpoint: str | None = None
    orchestrator_model: str | None = None
    worker_profile: str | None = None
    worker_endpoint: str | None = None
    worker_model: str | None = None
    approval: str | None = None


def resolve_orchestrator(
    manager: AgentManager, name: str | None, endpoint: str | None, model: str | None
) -> Profile:
    """The orchestrator's profile; refuses non-loopback endpoints when airgapped. The key comes
    from the keyring only for the profile's own endpoint (also a loopback proxy's)."""
    config = manager.config
    name = name or str(config.get("slipstream.profile"))
    model = model or str(config.get("slipstream.model")) or None
    profile = resolve_profile(config, name, endpoint, model)
    if profile.api_key is None:
        try:
            own = resolve_profile(config, name).endpoint
        except ProfileError:
            own = None
        if own == profile.endpoint:
            profile = dataclasses.replace(profile, api_key=load_key(name))
    return profile


def _require_key(profile: Profile) -> Profile:
    """A cloud orchestrator without a key would only answer 401: say so before starting."""
    if profile.api_key is None and not is_loopback(profile.endpoint):
        raise ProfileError(
            f"no API key for the orchestrator at {profile.endpoint}: run `openjet login "
            f"{profile.name}` (for another endpoint, add a [profiles.NAME] with it to the config "
            "and run `openjet login NAME`)"
        )
    return profile


class Slipstream:
    """Starts and resumes Slipstream runs on an `AgentManager` (its config and store)."""

    def __init__(self, manager: AgentManager) -> None:
        self.manager = manager

    def start(self, spec: SlipstreamSpec) -> SlipstreamRun:
        if not spec.task.strip():
            raise ValueError("give Slipstream a task")
        workdir = Path(spec.workdir).expanduser().resolve()
        if not workdir.is_dir():
            raise ValueError(f"workdir {spec.workdir} is not a directory")
        config = self.manager.config
        orchestrator = _require_key(
            resolve_orchestrator(
                self.manager,
                spec.orchestrator_profile,
                spec.orchestrator_endpoint,
                spec.orchestrator_model,
            )
        )
        resolve_profile(config, spec.worker_profile, spec.worker_endpoint, spec.worker_model)
        approval = check_mode(spec.approval or str(config.get("agent.approval")))
        record = self.manager.store.create(
            title=" ".join(spec.task.split())[:60],
            workdir=str(workdir),
            endpoint=orchestrator.endpoint,
            model=orchestrator.model,
            profile=orchestrator.name,
            approval=approval,
        )
        settings = {
            "task": spec.task,
            "approval": approval,
            "orchestrator_endpoint": spec.orchestrator_endpoint,
            "worker_profile": spec.worker_profile,
            "worker_endpoint": spec.worker_endpoint,
            "worker_model": spec.worker_model,
        }
        self.manager.store.append_event(record.id, "slipstream_started", settings)
        return SlipstreamRun(self.manager, record, orchestrator)

    def resume(self, session_id: str, retry_cloud: bool = False) -> SlipstreamRun:
        """Continue a stopped run. After a cloud failure the local side goes on alone, unless
        `retry_cloud`: then the orchestrator reviews again from the next exchange on."""
        record = self.manager.store.get(session_id)
        state = RunState.from_events(self.manager.store.events(session_id))
        if not state.task:
            raise ValueError(f"session {session_id} is not a Slipstream session")
        if not Path(record.workdir).is_dir():
            raise ValueError(f"the session's workdir {record.workdir} no longer exists")
        orchestrator = _require_key(
            resolve_orchestrator(
                self.manager,
                record.profile,
                state.settings.get("orchestrator_endpoint"),
                record.model or None,
            )
        )
        if retry_cloud and state.local_only and state.finished is None:
            self.manager.store.append_event(session_id, "slipstream_cloud_retry", {})
        return SlipstreamRun(self.manager, record, orchestrator)
