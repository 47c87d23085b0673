"""The job routes: an agent's scheduled jobs, and one job with its fires and deliveries (read-only;
the chat's tools, `/jobs` and the agent file change them)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Path, Query

from agentd.engine.agent import Agent
from agentd.engine.job_views import iso_times, job_detail, list_jobs
from agentd.events import CONVERSATION_KEY_PATTERN
from agentd.http.bodies import agent_param, documented_pattern
from agentd.http.directory import AgentDirectory
from agentd.http.errors import ApiError, routes
from agentd.http.lookup import check_key, running_agent
from agentd.http.reads import KEY_DESCRIPTION
from agentd.store.base import Store

# the ids the job book gives (j + 10 hex digits); a wider form, so an id of a later agentd is still read
JOB_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"


def add_job_routes(app: FastAPI, directory: AgentDirectory, protected: Sequence[Any]) -> None:
    get = routes(app, "GET", protected)

    @get("/agents/{agent}/jobs", 400, 404, 503)
    async def jobs(
        agent: str = agent_param(),
        conversation_key: str | None = Query(
            default=None,
            # checked by the route (a 400 with the reason); empty: every conversation's
            json_schema_extra={
                "anyOf": [
                    {"type": "string", "pattern": CONVERSATION_KEY_PATTERN},
                    {"type": "string", "maxLength": 0},
                ]
            },
            description=f"only this conversation's: {KEY_DESCRIPTION}; empty: every conversation's",
        ),
        ended: bool = Query(default=False, description="cancelled and done jobs too"),
        limit: int = Query(default=500, ge=1, le=5000),
    ) -> dict[str, Any]:
        """The agent's scheduled jobs, the oldest first: schedule (spec and in words), status, next fire (UTC
        and in the job's zone), owner, the conversation it delivers to."""
        runtime = running_agent(directory, agent)
        if conversation_key:
            check_key(conversation_key)
        rows = await list_jobs(
            await _store(runtime), conversation_key=conversation_key or None, ended=ended, limit=limit
        )
        return {"jobs": [iso_times(r) for r in rows]}

    @get("/agents/{agent}/jobs/{job_id}", 400, 404, 503)
    async def job(
        agent: str = agent_param(),
        job_id: str = Path(
            **documented_pattern(JOB_ID_PATTERN, "a job's id, as GET /agents/{agent}/jobs lists it")
        ),
    ) -> dict[str, Any]:
        """One job with its newest fires (scheduled, catch-up, manual: how each ended) and deliveries (pending,
        sent once the platform acknowledged it, failed after its retries), newest first."""
        runtime = running_agent(directory, agent)
        if not re.fullmatch(JOB_ID_PATTERN, job_id):
            raise ApiError(
                400, f"not a job id: {job_id!r} (letters, digits, '_' and '-', as /jobs lists them)"
            )
        detail = await job_detail(await _store(runtime), job_id)
        if detail is None:
            raise ApiError(404, f"no job {job_id!r} in agent {agent!r}")
        return {
            "job": iso_times(detail["job"]),
            "fires": [iso_times(f) for f in detail["fires"]],
            "deliveries": [iso_times(d) for d in detail["deliveries"]],
        }


async def _store(runtime: Agent) -> Store:
    """The running agent's store, once its data is open (the views read it as the CLI reads a store it
    opened read-only: agentd/engine/job_views.py)."""
    await runtime.ready()
    return runtime.state.store
