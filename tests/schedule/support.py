"""A daemon with a clock the test holds, and what its jobs stored."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from agentd.daemon.daemon import Daemon
from agentd.engine.agent import Agent
from agentd.store.job_queries import JobDeliveries, JobFires, Jobs
from agentd.store.job_records import DeliveryRecord, FireRecord, JobRecord
from testkit.clock import ManualClock

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z, a Friday


@contextlib.asynccontextmanager
async def scheduling_daemon(
    root: Path, agents: dict[str, str], clock: ManualClock, providers: dict[str, Any], settings: str = ""
) -> AsyncIterator[Daemon]:
    folder = root / "agents"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in agents.items():
        (folder / f"{name}.yaml").write_text(text)
    if settings:
        (root / "agentd.yaml").write_text(settings)
    daemon = Daemon(folder, root / "data", reload_interval=60, providers=providers, clock=clock)
    await daemon.start()
    try:
        yield daemon
    finally:
        await daemon.shutdown()


def agent_of(daemon: Daemon, name: str = "bot") -> Agent:
    agent = daemon.agent(name)
    assert agent is not None, daemon.agent_problem(name)
    return agent


async def jobs_of(agent: Agent, ended: bool = True) -> list[JobRecord]:
    return await agent.state.store.read(Jobs(ended=ended))


async def fires_of(agent: Agent, job_id: str) -> list[FireRecord]:
    return await agent.state.store.read(JobFires(job_id))


async def deliveries_of(agent: Agent, job_id: str | None = None) -> list[DeliveryRecord]:
    return await agent.state.store.read(JobDeliveries(job_id))


async def until(condition: Callable[[], Any], what: str, timeout: float = 10.0) -> Any:
    """Wait (real time, in short steps) until `condition()` (sync or async) is truthy; its value."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)
