"""A person in control of a run over HTTP: stopping a conversation's running turn, and answering at
once (409) a message whose conversation is held by a run waiting for an approval.

A message sent to a conversation whose run waits for a person's approval would wait behind it for
as long as the approval is open (up to its expiry); the caller gets a 409 with the approval's id
instead, and sends the message again once the approval is answered (POST
/agents/{agent}/approvals/{id}, or /approve and /deny). A retry of a message already answered is
not refused: it gets its first reply (idempotency).
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.params import Depends
from pydantic import BaseModel, Field

from agentd.engine.agent import Agent
from agentd.events import Attachment, InboundEvent
from agentd.http.auth import client_of
from agentd.http.bodies import agent_param
from agentd.http.directory import AgentDirectory
from agentd.http.errors import ApiError, routes
from agentd.http.lookup import conversation_agent
from agentd.http.openai_call import CHANNEL
from agentd.http.reads import conversation_key_param


class StopOut(BaseModel):
    agent: str
    conversation_key: str
    stopped: bool = Field(description="whether a turn was running and is now stopped")
    run_id: str | None = Field(description="the stopped run (its status is `stopped`), when one was")
    daemon: str | None = Field(
        None, description="the daemon that stopped it (of those sharing a store: the one running it)"
    )


def add_control_routes(app: FastAPI, directory: AgentDirectory, protected: list[Depends]) -> None:
    post = routes(app, "POST", protected)

    @post("/agents/{agent}/conversations/{conversation_key:path}/stop", 400, 404, 503, response_model=StopOut)
    async def stop(
        request: Request, agent: str = agent_param(), conversation_key: str = conversation_key_param()
    ) -> StopOut:
        """Stop the conversation's running turn, as `/stop` in the conversation does: the model call
        and tool calls in flight are cancelled, the person's message is kept, a streamed reply only as
        far as it was shown; a run waiting for an approval ends too (the approval cancelled). On a store
        several daemons share, the daemon running the turn stops it, whichever daemon is asked. Audited
        (`run/stopped`, reason `api`). Answered once the stopped run is stored; `stopped` is false when
        nothing was running (or the daemon running it did not answer within 12 s)."""
        target = conversation_agent(directory, agent, conversation_key)
        stopped = await target.stop_run(conversation_key, by=f"http:{client_of(request)}")
        return StopOut(
            agent=agent,
            conversation_key=conversation_key,
            stopped=stopped is not None,
            run_id=None if stopped is None else stopped.run_id,
            daemon=None if stopped is None else stopped.daemon,
        )


async def refuse_if_held(agent: Agent, event: InboundEvent, *, openai: bool = False) -> None:
    """A 409 naming the approval when `event` would wait behind one (see the module docstring): in
    agentd's shape (`approval`: its id), or in OpenAI's for /v1 (code `approval_pending`)."""
    approval = agent.held_by(event)
    if approval is None:
        return
    if event.event_id is not None and await agent.delivered(event.channel, event.event_id) is not None:
        return  # a retry of a message answered before: it gets that reply
    raise ApiError(
        409,
        f"conversation {event.conversation_key} waits for approval {approval}: answer it (POST "
        f"/agents/{agent.name}/approvals/{approval}, or /approve {approval} or /deny {approval}), then send "
        "this message again",
        **({"code": "approval_pending"} if openai else {"approval": approval}),
    )


async def v1_event(
    agent: Agent,
    key: str,
    text: str,
    user: str | None,
    attachments: tuple[Attachment, ...],
    event_id: str | None,
    stateless: bool,
) -> InboundEvent:
    """The event a /v1 call runs (chat completions and responses alike): a stateless call stores
    nothing, so its idempotency key is honoured in this process only (idempotency.py), not as a
    delivery id; a call into a conversation held by a pending approval is a 409 at once, not a hang."""
    event = InboundEvent(
        agent.name,
        key,
        text,
        CHANNEL,
        user_id=user,
        event_id=None if stateless else event_id,
        attachments=attachments,
    )
    if not stateless:
        await refuse_if_held(agent, event, openai=True)
    return event
