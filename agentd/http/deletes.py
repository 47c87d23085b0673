"""The delete routes: a person's episodes, a persistent memory, a conversation. Each is audited with
who asked (`http:<client address>`)."""

from __future__ import annotations

import re
from typing import Any

from fastapi import FastAPI, Path, Query, Request
from fastapi.params import Depends

from agentd.errors import ToolError
from agentd.events import CONVERSATION_KEY_PATTERN, USER_ID_FORM, USER_ID_PATTERN
from agentd.http.auth import client_of
from agentd.http.bodies import agent_param, documented_pattern
from agentd.http.directory import AgentDirectory
from agentd.http.errors import ApiError, routes
from agentd.http.lookup import check_user, conversation_agent, running_agent
from agentd.http.reads import conversation_key_param

MEMORY_KEY_PATTERN = r"^[A-Za-z0-9_.:-]{1,64}$"  # agentd.memory.persistent.KEY_RE
# a persistent memory's scope: the agent's (empty), a person's, an anonymous conversation's
SCOPE_PATTERN = "^(|user:" + USER_ID_PATTERN[1:-1] + "|conversation:" + CONVERSATION_KEY_PATTERN[1:-1] + ")$"


def add_delete_routes(app: FastAPI, directory: AgentDirectory, protected: list[Depends]) -> None:
    delete = routes(app, "DELETE", protected)

    def by(request: Request) -> str:
        return f"http:{client_of(request)}"

    @delete("/agents/{agent}/people/{user_id}/episodes", 400, 404, 503)
    async def forget_episodes(
        request: Request,
        agent: str = agent_param(),
        user_id: str = Path(**documented_pattern(USER_ID_PATTERN, f"the person's user id ({USER_ID_FORM})")),
    ) -> dict[str, Any]:
        """Delete every episode of one person (a data-subject request); audited with the count, never text."""
        check_user(user_id)
        deleted = await running_agent(directory, agent).forget_episodes(user_id, by=by(request))
        return {"agent": agent, "user_id": user_id, "deleted": deleted}

    @delete("/agents/{agent}/memories/{key}", 400, 404, 503)
    async def forget_memory(
        request: Request,
        agent: str = agent_param(),
        key: str = Path(**documented_pattern(MEMORY_KEY_PATTERN, "the memory's key")),
        scope: str = Query(
            default="",
            **documented_pattern(
                SCOPE_PATTERN,
                "whose memory: empty for the agent's; user:<user id> for a person's (persistent_scope: "
                "user); conversation:<key> for an anonymous conversation's (as `agentd memories` lists them)",
            ),
        ),
    ) -> dict[str, Any]:
        """Delete one persistent memory; audited with the key (`memory/forget`), never the value."""
        if not re.match(MEMORY_KEY_PATTERN, key):
            raise ApiError(400, f"not a memory key: {key!r} (1-64 of letters, digits, '_', '.', ':', '-')")
        if not re.match(SCOPE_PATTERN, scope):
            raise ApiError(400, f"not a scope: {scope!r} (empty, user:<user id> or conversation:<key>)")
        target = running_agent(directory, agent)
        try:
            await target.forget_memory(key, scope=scope, by=by(request))
        except ToolError as e:  # the key is well-formed (checked above): it is not held there
            raise ApiError(404, f"{e}{f' in scope {scope!r}' if scope else ''}") from None
        return {"agent": agent, "key": key, "scope": scope, "deleted": True}

    @delete("/agents/{agent}/conversations/{conversation_key:path}", 400, 404, 503)
    async def delete_conversation(
        request: Request, agent: str = agent_param(), conversation_key: str = conversation_key_param()
    ) -> dict[str, Any]:
        """Delete a conversation: every thread, archived ones too, with messages, summaries and memory
        state; audited with the counts (`conversation/delete`). Runs and audit events stay; episodes and
        facts made of it stay too (they are the person's: see DELETE …/people/{user_id}/episodes)."""
        target = conversation_agent(directory, agent, conversation_key)
        deleted = await target.delete_conversation(conversation_key, by=by(request))
        if not deleted["threads"]:
            raise ApiError(404, f"agent {agent!r} has no conversation {conversation_key!r}")
        return {"agent": agent, "conversation_key": conversation_key, **deleted}
