"""The tool routes: what an agent's tools are, the approvals and tool servers' questions waiting, and
answering one (as the operator: whoever holds the daemon's token)."""

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


class AnswerIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: Literal["accept", "decline"] = Field(description="accept: `content` goes to the server")
    content: dict[str, str | int | float | bool | list[str] | None] | None = Field(
        default=None, description="accept: the form's fields and their values (a URL request takes none)"
    )


class QuestionOut(BaseModel):
    id: str
    conversation_key: str = Field(description="the conversation whose tool call the question serves")
    user_id: str | None = Field(description="the person whose message the call serves")
    server: str = Field(description="the MCP server that asks")
    mode: Literal["form", "url"]
    message: str
    fields: dict[str, Any] = Field(description="form: its JSON Schema properties; url: none")
    required: list[str]
    url: str | None = Field(description="url: where the person is sent")
    expires_at: float = Field(description="Unix seconds: unanswered then, the server is told cancel")


class QuestionsOut(BaseModel):
    questions: list[QuestionOut]


class AnsweredOut(BaseModel):
    question: str
    status: Literal["answered"]
    text: str


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

    @get("/agents/{agent}/questions", 404, 503, response_model=QuestionsOut)
    async def questions(agent: str = agent_param()) -> Any:
        """MCP servers' questions (elicitation) waiting for an answer, oldest first; the request whose
        tool call asked keeps waiting until one is answered, declined or expires."""
        return {"questions": await running_agent(directory, agent).questions()}

    @post(
        "/agents/{agent}/questions/{question_id}",
        400,
        404,
        409,
        413,
        422,
        503,
        response_model=AnsweredOut,
        openapi_extra=body_schema(AnswerIn),
    )
    async def answer_question(request: Request, question_id: str, agent: str = agent_param()) -> Any:
        """Answer a waiting question (as the operator): `accept` with content that fits its form, or
        `decline`; 409 once it was answered or expired, 422 for content the form does not take."""
        body = await read_json(request, AnswerIn, directory.max_body_bytes)
        target = running_agent(directory, agent)
        answered = await target.answer_question(question_id, body.action, body.content)
        if answered.status != "answered":
            raise ApiError({"unknown": 404, "closed": 409, "invalid": 422}[answered.status], answered.text)
        return {"question": question_id, "status": "answered", "text": answered.text}

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
