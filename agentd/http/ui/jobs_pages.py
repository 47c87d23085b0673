"""The /ui/ pages of scheduled jobs: an agent's jobs with their next fire in each job's zone, and one
job with its fires and deliveries (what GET /agents/{agent}/jobs[/{job_id}] serves as JSON)."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from fastapi import Request

from agentd.engine.job_views import job_detail, list_jobs
from agentd.http.jobs_routes import JOB_ID_PATTERN
from agentd.http.ui.render import Problem
from agentd.http.ui.views import agent_path

if TYPE_CHECKING:
    from agentd.engine.agent import Agent

Page = tuple[str, dict[str, Any]]
Register = Callable[[str], Callable[[Callable[..., Awaitable[Page]]], Any]]


def add_job_pages(page: Register, running: Callable[[str], Agent]) -> None:
    """GET /ui/agents/{agent}/jobs (`?ended=1`: cancelled and done ones too) and …/jobs/{job_id}."""

    @page("/ui/agents/{agent}/jobs")
    async def jobs_page(request: Request, agent: str) -> Page:
        runtime = running(agent)
        ended = request.query_params.get("ended") in ("1", "true")
        await runtime.ready()
        jobs = await list_jobs(runtime.state.store, ended=ended)
        return "jobs.html", {
            "api": [f"{agent_path(agent)}/jobs" + ("?ended=true" if ended else "")],
            "agent": agent,
            "jobs": jobs,
            "ended": ended,
            "scheduled": runtime.spec.schedule is not None,
        }

    @page("/ui/agents/{agent}/jobs/{job_id}")
    async def job_page(request: Request, agent: str, job_id: str) -> Page:
        runtime = running(agent)
        if not re.fullmatch(JOB_ID_PATTERN, job_id):
            raise Problem(400, "Bad job id", f"Not a job id: {job_id}")
        await runtime.ready()
        detail = await job_detail(runtime.state.store, job_id)
        if detail is None:
            raise Problem(404, "Not found", f"No job {job_id} in agent {agent}.")
        return "job.html", {"api": [f"{agent_path(agent)}/jobs/{job_id}"], "agent": agent, **detail}
