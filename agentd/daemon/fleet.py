"""The daemon's agents: loaded from their files, reloaded, stopped; each other's sub-agent peers.

One teardown path (`_teardown`: stop the channels, drain, close) serves both
a removed file and the daemon's shutdown. An agent that cannot start — a
broken file, data written by a newer agentd, a store that cannot open — fails
alone: it shows as `error` with the reason in `GET /agents`, is audited and
logged, and every other agent starts.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentd.channels.chat import ChatChannel
from agentd.config.loader import parse_agent
from agentd.config.models import AgentSpec
from agentd.daemon.asking import ask as ask_question
from agentd.daemon.host import AgentChannels, AgentHost, Spawn
from agentd.daemon.provider_checks import agent_warnings
from agentd.daemon.resources import Resources
from agentd.daemon.schedules import Schedules
from agentd.engine.agent import Agent
from agentd.engine.model_chain import chain_facts
from agentd.errors import AgentdError, ConfigError, OperatorError
from agentd.events import InboundEvent, Reply

log = logging.getLogger("agentd")
DRAIN_TIMEOUT = 30.0
Audit = Callable[[str, str, str | None, dict[str, Any]], Coroutine[Any, Any, None]]


@dataclass
class AgentEntry:
    name: str
    path: Path
    spec: AgentSpec | None = None  # the last good definition
    agent: Agent | None = None
    last_error: str | None = None
    warnings: list[str] = field(default_factory=list)  # what will fail when it calls its models
    channels: AgentChannels | None = field(default=None, repr=False)

    @property
    def status(self) -> str:
        if self.agent is not None:
            return self.agent.status
        return "error" if self.last_error else "stopped"

    @property
    def conversations_waiting(self) -> int:
        return self.agent.conversations_waiting if self.agent is not None else 0

    def channel_states(self) -> list[dict[str, Any]]:
        spec = self.agent.spec if self.agent else self.spec
        if spec is None:
            return []
        statuses = self.channels.host.statuses if self.channels else {}
        holders = self.channels.holders if self.channels else {}
        out = []
        for name in spec.channels.enabled():
            default = ("running" if name == "webhook" and self.agent else "stopped", None)
            status, error = statuses.get(name, default)
            out.append({"name": name, "status": status, "error": error, "held_by": holders.get(name)})
        return out


class Fleet:
    """Every agent of the daemon by name; also the `Peers` each agent's sub-agent tools reach, and the
    `Outbox` a run resumed after an approval posts its answer through."""

    def __init__(self, resources: Resources, audit: Audit, spawn: Spawn, schedules: Schedules | None = None):
        self.resources = resources
        self.schedules = schedules  # each agent's scheduled jobs (agentd/daemon/schedules.py)
        resources.outbox = self  # resumed runs post into conversations through the agents' channels
        self._audit = audit
        self._spawn = spawn
        self.entries: dict[str, AgentEntry] = {}

    # -- Peers -------------------------------------------------------------------------------

    def spec(self, name: str) -> AgentSpec | None:
        entry = self.entries.get(name)
        if entry is None:
            return None
        return entry.agent.spec if entry.agent is not None else entry.spec

    def running(self, name: str) -> bool:
        entry = self.entries.get(name)
        return entry is not None and entry.agent is not None and entry.agent.status == "running"

    async def post(self, agent: str, conversation_key: str, text: str) -> bool:
        """The agents' Outbox: post into a conversation through the agent's channel of that kind."""
        entry = self.entries.get(agent)
        channel = (
            entry.channels.channels.get(conversation_key.partition(":")[0])
            if entry and entry.channels
            else None
        )
        if not isinstance(channel, ChatChannel):
            return False
        try:
            return await channel.post(conversation_key, text)
        except Exception:
            log.exception("agent %s: posting into %s failed", agent, conversation_key)
            return False

    async def ask(
        self, agent: str, conversation_key: str, text: str, question: Mapping[str, Any]
    ) -> str | None:
        """The agents' Outbox for a tool server's question (agentd.daemon.asking)."""
        r = self.resources
        post = functools.partial(self.post, agent, conversation_key, text)
        return await ask_question(
            agent, self.spec(agent), r.http, r.clock, post, conversation_key, text, question
        )

    async def delegate(self, name: str, event: InboundEvent, parent_run_id: str | None) -> Reply:
        agent = self.agent(name)
        if agent is None:
            raise LookupError(f"no agent {name!r} is running")
        return await agent.handle(event, parent_run_id)

    def agent(self, name: str) -> Agent | None:
        entry = self.entries.get(name)
        return entry.agent if entry is not None else None

    def problem(self, name: str) -> str | None:
        """Why a listed agent has no runtime (its file was rejected, it could not start); None when
        there is no such agent, or it has one."""
        entry = self.entries.get(name)
        if entry is None or entry.agent is not None:
            return None
        if entry.last_error is None:
            return "it is stopped"
        what = "its file was rejected" if entry.spec is None else "it could not start"
        return f"{what}: {entry.last_error}"

    # -- load, reload, remove ----------------------------------------------------------------

    async def load(self, name: str, path: Path) -> None:
        """Start the agent of a new file, or reload a changed one (a broken edit keeps the old).

        A new agent is listed once its first load is over (started, or failed with its reason).
        """
        entry = self.entries.get(name) or AgentEntry(name, path)
        entry.path = path  # x.yml when x.yaml beside it went away
        try:
            await self._load(entry, path)
        finally:
            self.entries[name] = entry

    async def _load(self, entry: AgentEntry, path: Path) -> None:
        name = entry.name
        reloading = entry.agent is not None
        try:
            spec = self._parse(path)
        except (ConfigError, OperatorError) as e:
            message = str(e)
            entry.last_error = message + (" (running the last good definition)" if reloading else "")
            log.error(
                "agent %s: config rejected%s:\n%s",
                name,
                " (kept the last good one)" if reloading else "",
                message,
            )
            data = {"file": str(path), "error": message, "kept_previous": reloading}
            await self._audit("config", "rejected", name, data)
            return
        except OSError as e:
            entry.last_error = f"cannot read {path}: {e}"
            log.error("agent %s: %s", name, entry.last_error)
            return
        old, entry.spec, entry.last_error = entry.spec, spec, None
        if entry.agent is None:
            if not await self._start(entry, spec):
                return
        else:
            await entry.agent.reload(spec)
            await self._audit("config", "reloaded", name, {"file": str(path)})
            log.info("agent %s: reloaded", name)
        self._check_providers(entry, spec)
        if self.schedules is not None and entry.agent is not None:
            self.schedules.apply(entry.agent)
        if old is None or old.channels != spec.channels or entry.channels is None:
            await self._stop_channels(entry)
            resources = self.resources
            entry.channels = AgentChannels(
                AgentHost(entry, self._spawn),
                self._spawn,
                resources.leases,
                resources.daemon_id,
                resources.settings.store.lease_s,
            )
            entry.channels.start(spec)

    def _check_providers(self, entry: AgentEntry, spec: AgentSpec) -> None:
        assert self.resources.providers is not None
        entry.warnings = agent_warnings(spec, self.resources.settings, self.resources.providers)
        for warning in entry.warnings:
            log.warning("agent %s: %s", entry.name, warning)

    def _parse(self, path: Path) -> AgentSpec:
        settings = self.resources.settings
        assert self.resources.providers is not None
        # every model reference must name a known provider: checked while parsing, as `agentd check` does
        return parse_agent(
            path, default_model=settings.defaults.model, providers=self.resources.providers.names()
        )

    async def _start(self, entry: AgentEntry, spec: AgentSpec) -> bool:
        try:
            agent = await self.resources.open_agent(spec, peers=self)
        except AgentdError as e:
            entry.last_error = str(e)
            log.error("agent %s: cannot start: %s", entry.name, e)
            await self._audit("config", "failed", entry.name, {"file": str(entry.path), "error": str(e)})
            return False
        entry.agent = agent
        agent.lifecycle.on_fail = lambda reason: self._failed_at_first_use(entry, reason)
        await self._audit("config", "loaded", entry.name, {"file": str(entry.path)})
        log.info("agent %s: loaded (%s)", entry.name, spec.model.name)
        return True

    async def _failed_at_first_use(self, entry: AgentEntry, reason: str) -> None:
        """An agent's data is opened at its first use, not at start: a file from a newer agentd fails
        the agent then, as it would have at start (logged, audited, shown in GET /agents)."""
        log.error("agent %s: cannot serve: %s", entry.name, reason)
        await self._audit("config", "failed", entry.name, {"file": str(entry.path), "error": reason})

    async def remove(self, name: str) -> None:
        entry = self.entries.pop(name, None)
        if entry is None:
            return
        await self._teardown(entry)
        await self._audit("config", "removed", name, {"file": str(entry.path)})
        log.info("agent %s: stopped (file removed)", name)

    async def close_all(self) -> None:
        """Stop intake on every channel first, then drain and close every agent."""
        for entry in list(self.entries.values()):
            await self._stop_channels(entry)
        for entry in list(self.entries.values()):
            await self._teardown(entry)

    async def _teardown(self, entry: AgentEntry) -> None:
        if self.schedules is not None:
            await self.schedules.stop(entry.name)  # no fire starts while the agent drains
        await self._stop_channels(entry)
        if entry.agent is not None:
            await entry.agent.drain(timeout=DRAIN_TIMEOUT)
            await entry.agent.close()

    async def _stop_channels(self, entry: AgentEntry) -> None:
        if entry.channels is not None:
            await entry.channels.stop()

    # -- periodic ----------------------------------------------------------------------------

    def running_agents(self) -> list[Agent]:
        return [
            e.agent
            for e in list(self.entries.values())
            if e.agent is not None and e.agent.status == "running"
        ]

    # -- what GET /agents shows --------------------------------------------------------------

    def describe(self) -> list[dict[str, Any]]:
        out = []
        for name in sorted(self.entries):
            entry = self.entries[name]
            spec = entry.agent.spec if entry.agent else entry.spec
            out.append(
                {
                    "name": name,
                    "file": str(entry.path),
                    "model": spec.model.name if spec else None,
                    # the fallback chain and its breakers: a primary being skipped shows `skipped`
                    "models": chain_facts(self.resources.breakers, spec.model.chain) if spec else [],
                    "memory": spec.memory.model_dump() if spec else None,
                    "channels": entry.channel_states(),
                    "status": entry.status,
                    "last_error": entry.last_error
                    or (entry.agent.lifecycle.last_error if entry.agent else None),
                    "warnings": entry.warnings,
                    # unopened: not used since start (its data file is opened, and checked, at first use)
                    "data": entry.agent.data_state if entry.agent else None,
                    # each MCP server's state, tools and problems (a pattern that matches no tool)
                    "tool_servers": entry.agent.state.tool_servers.describe() if entry.agent else {},
                }
            )
        return out


def log_startup(address: str, fleet: Fleet) -> None:
    """The startup line: the agents served, and apart, those rejected with their errors (a warning)."""
    served = sorted(name for name, entry in fleet.entries.items() if entry.status == "running")
    rejected = {
        name: entry.last_error or entry.status
        for name, entry in sorted(fleet.entries.items())
        if entry.status != "running"
    }
    line = f"listening on {address}, serving {_agents(len(served))}: {', '.join(served) or 'none'}"
    if rejected:
        details = "; ".join(f"{name} ({' | '.join(error.splitlines())})" for name, error in rejected.items())
        line += f"; rejected {_agents(len(rejected))}: {details}"
    data = {"address": address, "served": served, "rejected": rejected}
    log.log(logging.WARNING if rejected else logging.INFO, "%s", line, extra={"data": data})


def _agents(count: int) -> str:
    return f"{count} agent{'' if count == 1 else 's'}"
