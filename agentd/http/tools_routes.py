"""The tool routes: what an agent's tools are, the approvals waiting, and answering one."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Literal

from fastapi import Depends, FastAPI
from pydantic import BaseModel, ConfigDict, Field

from agentd.engine.agent import Agent


class DecisionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    decision: Literal["approve", "deny"] = Field(description="approve: the call runs; deny: it is refused")


def add_tool_routes(
    app: FastAPI,
    agent_or_404: Callable[[str], Agent],
    require_token: Callable[..., Coroutine[Any, Any, None]],
    api_error: Callable[[int, str], Exception],
) -> None:
    guarded = [Depends(require_token)]

    @app.get("/agents/{agent}/tools", tags=["agents"], dependencies=guarded)
    async def tools(agent: str) -> dict[str, Any]:
        """Every tool with its source (MCP server, memory, agents) and the policy's decision; the servers."""
        return agent_or_404(agent).tools_report()

    @app.get("/agents/{agent}/approvals", tags=["agents"], dependencies=guarded)
    async def approvals(agent: str) -> dict[str, Any]:
        """Tool calls waiting for a person's approval, oldest first."""
        return {"approvals": await agent_or_404(agent).approvals()}

    @app.post("/agents/{agent}/approvals/{approval_id}", tags=["agents"], dependencies=guarded)
    async def decide(agent: str, approval_id: str, body: DecisionIn) -> dict[str, Any]:
        """Approve or deny a waiting tool call (as the operator); answers once the run has resumed."""
        outcome = await agent_or_404(agent).decide_approval(approval_id, body.decision == "approve")
        if outcome.status == "unknown":
            raise api_error(404, f"no approval {approval_id!r} in agent {agent!r}")
        if outcome.status == "closed":
            raise api_error(409, outcome.reply_text)
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
