"""`agentd jobs AGENT [JOB]`: an agent's scheduled jobs, or one job with its fires and deliveries.

Through the daemon that owns the data folder when one runs (GET /agents/{agent}/jobs[/{job}]); with
none, from the agent's store opened read-only here (its SQLite file, or its rows in PostgreSQL: safe
beside daemons on other hosts). `--json` prints what the API answers, either way.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any
from urllib.parse import quote

from agentd.cli.remote import answer, running_daemon
from agentd.cli.settings import settings_of
from agentd.daemon.resources import Resources
from agentd.engine.job_views import iso_times, job_detail, list_jobs
from agentd.errors import AgentdError, NotStored


def cmd_jobs(args: argparse.Namespace) -> int:
    with running_daemon(args) as client:
        if client is not None:
            path = f"/agents/{quote(args.agent, safe='')}/jobs"
            if args.job is not None:
                found: dict[str, Any] = answer(client.get(f"{path}/{quote(args.job, safe='')}"))
            else:
                params = {"ended": "true" if args.all else "false"}
                params |= {"conversation_key": args.conversation} if args.conversation else {}
                found = answer(client.get(path, params=params))
        else:
            found = asyncio.run(_here(args))
    if args.json:
        print(json.dumps(found, indent=2, ensure_ascii=False))
    else:
        print(render_detail(found) if args.job is not None else render_jobs(found["jobs"]))
    return 0


async def _here(args: argparse.Namespace) -> dict[str, Any]:
    async with Resources(settings_of(args), args.data) as resources:
        store = resources.store(args.agent, readonly=True)
        try:
            await store.open()
        except NotStored as e:
            raise AgentdError(f"{e} (has agent {args.agent!r} run yet?)") from None
        try:
            if args.job is None:
                rows = await list_jobs(store, conversation_key=args.conversation, ended=args.all)
                return {"jobs": [iso_times(r) for r in rows]}
            detail = await job_detail(store, args.job)
        finally:
            await store.close()
    if detail is None:
        raise AgentdError(f"no job {args.job!r} in agent {args.agent!r}")
    return {
        key: iso_times(value) if key == "job" else [iso_times(v) for v in value]
        for key, value in detail.items()
    }


def job_line(job: dict[str, Any]) -> str:
    state = job["status"] + (f" ({job['paused_reason']})" if job.get("paused_reason") else "")
    said = job["text"] if len(job["text"]) <= 50 else job["text"][:47] + "..."
    return (
        f"{job['id']}  {state:<9} {job['kind']:<9} {job['describe']}; next {job['next_fire_local'] or 'none'}"
        f"  {job['deliver_to'] or 'last'}  {said!r}"
    )


def render_jobs(jobs: list[dict[str, Any]]) -> str:
    return "\n".join(job_line(j) for j in jobs) or "(no jobs)"


def render_detail(found: dict[str, Any]) -> str:
    job = found["job"]
    lines = [
        job_line(job),
        f"  schedule {job['schedule']} ({job['timezone']}), owner {job['owner'] or 'operator'}, "
        f"failures {job['failures']}" + (f", name {job['name']}" if job["name"] else ""),
        "fires (newest first):",
    ]
    lines += [
        f"  {f['fire_at']}  {f['trigger']:<8} {f['status']:<7} run {f['run_id'] or '-'}"
        + (f"  {f['error']}" if f["error"] else "")
        for f in found["fires"]
    ] or ["  (none)"]
    lines.append("deliveries (newest first):")
    lines += [
        f"  {d['id']}  {d['status']:<7} attempts {d['attempts']}  to {d['conversation_key']}"
        + (
            f"  sent {d['sent_at']}"
            if d["sent_at"]
            else f"  next try {d['next_attempt_at']}"
            if d["status"] == "pending"
            else ""
        )
        + (f"  last error: {d['last_error']}" if d["last_error"] else "")
        for d in found["deliveries"]
    ] or ["  (none)"]
    return "\n".join(lines)
