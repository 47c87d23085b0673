"""Finding what a route names: a running agent (404 unknown, 503 not running and why), a conversation key."""

from __future__ import annotations

from agentd.engine.agent import Agent
from agentd.events import is_conversation_key
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
        raise ApiError(503, f"agent {name!r} is {agent.status}")
    return agent


def check_key(conversation_key: str) -> None:
    if not is_conversation_key(conversation_key):
        raise ApiError(
            400, f"not a conversation key: {conversation_key!r} (expected <channel>:<id>, e.g. webhook:t-1)"
        )
