"""/jobs: this conversation's jobs with their next fire in each job's zone; `/jobs cancel <id>`,
`/jobs pause <id>`, `/jobs resume <id>` — only the job's owner (or an operator) may."""

from __future__ import annotations

from typing import Any

from agentd.engine.conversation import Conversation
from agentd.engine.jobs import Asker, JobRefused, describe
from agentd.events import InboundEvent
from agentd.store.job_queries import JobDeliveries

USAGE = "/jobs lists this conversation's jobs; /jobs cancel <id>, /jobs pause <id>, /jobs resume <id>"
STATUS_OF = {"cancel": "cancelled", "pause": "paused", "resume": "active"}


Said = tuple[str, dict[str, Any]]
TROUBLE = 5  # the newest deliveries of a job looked at for a failing one  # the reply, and what the command's audit event records


async def jobs_command(conv: Conversation, event: InboundEvent) -> Said:
    book = conv.agent.jobs
    words = event.text.strip().split()[1:]
    if not words:
        jobs = await book.of_conversation(event.conversation_key)
        if not jobs:
            return ("No jobs in this conversation.", {"count": 0})
        lines = [describe(j) + await _delivery_trouble(conv, j.id) for j in jobs]
        return ("Jobs:\n" + "\n".join(lines), {"count": len(jobs)})
    if len(words) != 2 or words[0].lower() not in STATUS_OF:
        return (USAGE, {"result": "usage"})
    verb, job_id = words[0].lower(), words[1]
    if event.who is None:
        return "This conversation does not say who you are: a job is its owner's.", {"result": "refused"}
    try:
        job = await book.set_status(
            Asker(event.who, event.user_id, event.conversation_key), job_id, STATUS_OF[verb]
        )
    except JobRefused as e:
        return (f"Not done: {e}.", {"result": "refused", "verb": verb, "job": job_id})
    done = {"cancel": "Cancelled", "pause": "Paused", "resume": "Resumed"}[verb]
    return (f"{done} {describe(job)}", {"result": verb, "job": job.id})


async def _delivery_trouble(conv: Conversation, job_id: str) -> str:
    """What /jobs says of a job whose message did not get through: retrying, or given up."""
    for delivery in await conv.agent.store.read(JobDeliveries(job_id, limit=TROUBLE)):
        if delivery.status == "failed":
            return f"\n  a message was not delivered after {delivery.attempts} tries: {delivery.last_error}"
        if delivery.status == "pending" and delivery.attempts:
            return f"\n  delivery failing ({delivery.attempts} tries so far, retrying): {delivery.last_error}"
    return ""
