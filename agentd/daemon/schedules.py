"""The daemon's schedulers: one per running agent whose file has a `schedule:` block (an agent without
one has no jobs and costs nothing here), started with the agent, told of its reloads, stopped first
at its teardown so no fire starts while it drains."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import httpx

from agentd.daemon.host import Spawn
from agentd.daemon.job_delivery import Deliverer
from agentd.daemon.job_metrics import JobMetrics
from agentd.daemon.resources import Resources
from agentd.daemon.scheduler import AgentScheduler
from agentd.engine.agent import Agent


class Schedules:
    def __init__(self, resources: Resources, spawn: Spawn, metrics: JobMetrics):
        self._resources, self._spawn, self.metrics = resources, spawn, metrics
        self.running: dict[str, tuple[AgentScheduler, asyncio.Task[Any]]] = {}
        self._http: httpx.AsyncClient | None = None  # for signed webhook deliveries, made when needed

    def apply(self, agent: Agent) -> None:
        """Start the agent's scheduler, or tell it the file changed; stop it when the block went."""
        running = self.running.get(agent.name)
        if agent.spec.schedule is None:
            if running is not None:
                self._spawn(self.stop(agent.name))
            return
        if running is not None and running[0].agent is agent:
            running[0].resync()
            return
        r = self._resources
        lease_s, clock = r.settings.store.lease_s, r.clock
        if self._http is None:
            self._http = httpx.AsyncClient()
        deliverer = Deliverer(
            agent, r.leases, r.daemon_id, lease_s, clock, self.metrics, r.outbox, self._http
        )
        scheduler = AgentScheduler(agent, r.leases, r.daemon_id, lease_s, clock, self.metrics, deliverer)
        self.running[agent.name] = (scheduler, self._spawn(scheduler.run()))

    async def stop(self, name: str) -> None:
        running = self.running.pop(name, None)
        if running is not None:
            task = running[1]
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def close(self) -> None:
        for name in list(self.running):
            await self.stop(name)
        if self._http is not None:
            await self._http.aclose()
            self._http = None
