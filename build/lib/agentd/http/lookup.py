"""Finding what a route names: a running agent (404 unknown, 503 not running and why), a conversation key."""

from __future__ import annotations

import re

from agentd.engine.agent import Agent
from agentd.events import is_conversation_key
from agentd.http.bodies import USER_ID_PATTERN
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


USER_ID_FORM = "1-128 characters, no spaces"


def check_user(user_id: str | None) -> None:
    if user_id is not None and not re.match(USER_ID_PATTERN, user_id):
        raise ApiError(400, f"not a user id: {user_id!r} ({USER_ID_FORM})")
