"""The job tools the model can call (source `jobs`, under the tools policy like any tool, so `ask` and
`deny` apply): schedule_job, list_jobs, update_job, cancel_job, run_job_now. A refused job is a tool
error whose text is the reason, so the model can say it or try again."""

from __future__ import annotations

from typing import Any

from agentd.config.tools import JOBS_SOURCE
from agentd.engine.jobs import Asker, JobBook, JobRefused, describe
from agentd.errors import ToolError
from agentd.providers.base import ToolSpec
from agentd.tools.base import Tool, ToolCall, object_schema

WHEN = (
    "when it fires: 'cron <5 fields>' (e.g. 'cron 0 9 * * 1' every Monday at 09:00), 'every <duration>' "
    "(e.g. 'every 1d'), or 'at <local date-time>' (e.g. 'at 2026-12-24T18:00')"
)
WHAT = "a reminder's text (delivered as written), or a task's prompt (the agent runs it and sends its reply)"
ZONE = "the person's IANA time zone (e.g. Europe/Lisbon) when they said it; default: the agent's"


def _string(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def _asker(call: ToolCall) -> Asker:
    if call.who is None:  # a job belongs to the person who asked; None would be the operator
        raise ToolError("this conversation does not say who is asking: a job belongs to the person who asked")
    return Asker(call.who, call.user_id, call.conversation_key)


def _text(args: dict[str, Any], name: str) -> str | None:
    value = args.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ToolError(f"{name} must be a string")
    return value


def job_tools(book: JobBook) -> list[Tool]:
    async def schedule_job(args: dict[str, Any], call: ToolCall) -> str:
        when, what = _text(args, "when"), _text(args, "what")
        if not when or not what:
            raise ToolError("schedule_job needs `when` and `what`")
        try:
            job = await book.create(
                _asker(call), when, what, _text(args, "kind") or "reminder", _text(args, "timezone")
            )
        except JobRefused as e:
            raise ToolError(f"not scheduled: {e}") from None
        return f"scheduled {describe(job)}"

    async def list_jobs(args: dict[str, Any], call: ToolCall) -> str:
        jobs = await book.of_conversation(call.conversation_key)
        return "\n".join(describe(j) for j in jobs) or "no jobs in this conversation"

    async def update_job(args: dict[str, Any], call: ToolCall) -> str:
        job_id = _text(args, "id")
        if not job_id:
            raise ToolError("update_job needs the job's `id`")
        try:
            job = await book.update(
                _asker(call),
                job_id,
                when=_text(args, "when"),
                text=_text(args, "what"),
                kind=_text(args, "kind"),
                timezone=_text(args, "timezone"),
            )
        except JobRefused as e:
            raise ToolError(f"not changed: {e}") from None
        return f"changed {describe(job)}"

    async def cancel_job(args: dict[str, Any], call: ToolCall) -> str:
        try:
            job = await book.set_status(_asker(call), _text(args, "id") or "", "cancelled")
        except JobRefused as e:
            raise ToolError(f"not cancelled: {e}") from None
        return f"cancelled {job.id}"

    async def run_job_now(args: dict[str, Any], call: ToolCall) -> str:
        try:
            job = await book.fire_now(_asker(call), _text(args, "id") or "")
        except JobRefused as e:
            raise ToolError(f"not run: {e}") from None
        return f"running {job.id} now (its schedule stays as it is); its message follows"

    job_id = _string("the job's id, as list_jobs and the prompt show it")
    kind = {"type": "string", "enum": ["reminder", "task"], "description": WHAT}
    optional = {"when": _string(WHEN), "what": _string(WHAT), "kind": kind, "timezone": _string(ZONE)}

    def tool(name: str, description: str, schema: dict[str, Any], handler: Any) -> Tool:
        return Tool(
            ToolSpec(name, description, schema), handler, source=JOBS_SOURCE, plain_args=frozenset({"id"})
        )

    return [
        tool(
            "schedule_job",
            "Schedule a reminder or a task for this conversation (it is delivered here at its time).",
            object_schema(optional, required=["when", "what"]),
            schedule_job,
        ),
        tool(
            "list_jobs", "List this conversation's jobs with their next fire.", object_schema({}), list_jobs
        ),
        tool(
            "update_job",
            "Change a job of this conversation (e.g. 'make it weekly instead'): give only what changes.",
            object_schema({"id": job_id, **optional}, required=["id"]),
            update_job,
        ),
        tool("cancel_job", "Cancel a job for good.", object_schema({"id": job_id}), cancel_job),
        tool(
            "run_job_now",
            "Fire a job once now; its schedule is not shifted.",
            object_schema({"id": job_id}),
            run_job_now,
        ),
    ]
