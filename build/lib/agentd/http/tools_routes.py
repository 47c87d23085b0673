"""The tool routes: what an agent's tools are, the approvals waiting, and answering one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from fastapi import FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field

from agentd.http.bodies import agent_param, body_schema, read_json
from agentd.http.directory import AgentDirectory
from agentd.http.errors import ApiError, routes
from agentd.http.lookup import running_agent


class DecisionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    decision: Literal["approve", "deny"] = Field(description="approve: the call runs; deny: it is refused")


def add_tool_routes(app: FastAPI, directory: AgentDirectory, protected: Sequence[Any]) -> None:
    get, post = routes(app, "GET", protected), routes(app, "POST", protected)

    @get("/agents/{agent}/tools", 404, 503)
    async def tools(agent: str = agent_param()) -> dict[str, Any]:
        """Every tool with its source (MCP server, memory, agents) and the policy's decision; the servers."""
        return running_agent(directory, agent).tools_report()

    @get("/agents/{agent}/approvals", 404, 503)
    async def approvals(agent: str = agent_param()) -> dict[str, Any]:
        """Tool calls waiting for a person's approval, oldest first."""
        return {"approvals": await running_agent(directory, agent).approvals()}

    @post(
        "/agents/{agent}/approvals/{approval_id}",
        400,
        404,
        409,
        413,
        503,
        openapi_extra=body_schema(DecisionIn),
    )
    async def decide(request: Request, approval_id: str, agent: str = agent_param()) -> dict[str, Any]:
        """Approve or deny a waiting tool call (as the operator); answers once the run has resumed."""
        body = await read_json(request, DecisionIn, directory.max_body_bytes)
        outcome = await running_agent(directory, agent).decide_approval(
            approval_id, body.decision == "approve"
        )
        if outcome.status == "unknown":
            raise ApiError(404, f"no approval {approval_id!r} in agent {agent!r}")
        if outcome.status == "closed":
            raise ApiError(409, outcome.reply_text)
        resumed = outcome.resumed
        return {
            "approval": approval_id,
            "status": outcome.status,
            "text": outcome.reply_text,
            "reply": None
            if resumed is None
            else {
                "reply": resumed.text,
                "run_id": resumed.run_id,
                "conversation_key": resumed.conversation_key,
                "error": resumed.error,
            },
        }
