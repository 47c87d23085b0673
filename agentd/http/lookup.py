"""Finding what a route names: a running agent (404 unknown, 503 not running and why), a conversation key."""

from __future__ import annotations

from agentd.engine.agent import Agent
from agentd.events import USER_ID_FORM, is_conversation_key, is_user_id
from agentd.http.directory import AgentDirectory
from agentd.http.errors import ApiError


def running_agent(directory: AgentDirectory, name: str) -> Agent:
    agent = directory.agent(name)
    if agent is None:
        problem = directory.agent_problem(name)
        if problem is None:
            raise ApiError(404, f"no agent named {name!r}")
        raise ApiError(503, f"agent {name!r} is not running: {problem}")
    if agent.status != "running":
        reason = agent.lifecycle.last_error
        raise ApiError(503, f"agent {name!r} is {agent.status}" + (f": {reason}" if reason else ""))
    return agent


def conversation_agent(directory: AgentDirectory, name: str, conversation_key: str) -> Agent:
    """The running agent `name`, for a route about one of its conversations (the key checked too)."""
    agent = running_agent(directory, name)
    check_key(conversation_key)
    return agent


def check_key(conversation_key: str) -> None:
    if not is_conversation_key(conversation_key):
        raise ApiError(
            400, f"not a conversation key: {conversation_key!r} (expected <channel>:<id>, e.g. webhook:t-1)"
        )


def check_user(user_id: str | None) -> None:
    """A people route's user id, by the one rule of agentd.events (what the intake accepts)."""
    if user_id is not None and not is_user_id(user_id):
        raise ApiError(400, f"not a user id: {user_id!r} ({USER_ID_FORM})")
