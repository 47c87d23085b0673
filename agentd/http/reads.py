"""The read routes: agents, the audit trail, runs, status, conversations and what the model sees next."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Path, Query
from fastapi.params import Depends

from agentd.events import CONVERSATION_KEY_PATTERN, USER_ID_PATTERN
from agentd.http.bodies import (
    TIME_SCHEMA,
    agent_param,
    documented_pattern,
    iso,
    media_url,
    parse_since,
)
from agentd.http.directory import AgentDirectory
from agentd.http.errors import ApiError, routes
from agentd.http.lookup import check_user, conversation_agent, running_agent
from agentd.store.records import AUDIT_KINDS

KEY_DESCRIPTION = "a conversation key, <channel>:<id> (webhook:t-1, repl:local, discord:123, ...)"
RUN_KEYS = (
    "id",
    "conversation_key",
    "trigger",
    "model",
    "status",
    "input_tokens",
    "output_tokens",
    "tokens_estimated",
    "duration_ms",
    "error",
    "parent_run_id",
    "daemon",
)


def conversation_key_param() -> Any:
    return Path(**documented_pattern(CONVERSATION_KEY_PATTERN, KEY_DESCRIPTION))


def add_read_routes(app: FastAPI, directory: AgentDirectory, protected: list[Depends]) -> None:
    get = routes(app, "GET", protected)

    @get("/agents")
    async def agents() -> dict[str, Any]:
        """Every agent (model, memory, channels and their states, status, last error, warnings); what the
        daemon holds for all of them (open files, hot threads' memory); memory models that failed lately."""
        return {
            "daemon": directory.describe_daemon(),
            "agents": directory.describe_agents(),
            "memory_models": directory.memory_models(),
        }

    @get("/audit", 400, 404, tag="daemon")
    async def audit(
        agent: str | None = Query(default=None, description="one agent's events, its config events too"),
        kind: str | None = Query(
            default=None,
            json_schema_extra={"enum": ["", *AUDIT_KINDS]},
            description="only events of this kind (another is a 400); empty: any kind",
        ),
        since: str | None = Query(
            default=None,
            json_schema_extra={"anyOf": [*TIME_SCHEMA["anyOf"], {"type": "string", "maxLength": 0}]},
            description=f"only events at or after this time: {TIME_SCHEMA['description']}; empty: any time",
        ),
        limit: int = Query(default=100, ge=1, le=1000),
        tool: str | None = Query(
            default=None, description="only events about this tool (e.g. files__write_file)"
        ),
    ) -> dict[str, Any]:
        """Audit events, newest last: the agents' own and the daemon's (config, auth). Each names its
        hash chain (`chain`: the agent, or `_daemon`), its place there (`seq`), its `hash` and the hash
        of the event before it in that chain (`prev_hash`): consecutive events of a chain link up."""
        agent, kind, tool = agent or None, kind or None, tool or None  # `?agent=` filters nothing
        if kind is not None and kind not in AUDIT_KINDS:  # a typo would read as "no such events"
            raise ApiError(
                400, f"kind: no audit events are of kind {kind!r}; the kinds: {', '.join(AUDIT_KINDS)}"
            )
        events = await directory.query_audit(agent, kind, parse_since(since), limit, tool)
        if agent is not None and not events and not await _known(directory, agent):
            raise ApiError(404, f"no agent named {agent!r}, and no audit events of one")
        return {"events": [{**e, "ts": iso(e["ts"])} for e in events]}

    @get("/agents/{agent}/runs", 404, 503)
    async def runs(
        agent: str = agent_param(),
        conversation_key: str | None = None,
        limit: int = Query(default=50, ge=1, le=1000),
    ) -> dict[str, Any]:
        """Runs, the newest first: trigger, model, status, tokens (estimated or not), duration, error."""
        rows = await running_agent(directory, agent).runs(conversation_key, limit)
        return {"runs": [_run_out(r) for r in rows]}

    @get("/agents/{agent}/status", 400, 404, 503)
    async def status(
        agent: str = agent_param(),
        conversation_key: str = Query(**documented_pattern(CONVERSATION_KEY_PATTERN, KEY_DESCRIPTION)),
        user_id: str | None = Query(default=None, **documented_pattern(USER_ID_PATTERN, "whose memory keys")),
    ) -> dict[str, Any]:
        """What `/status` says in that conversation, as JSON."""
        target = conversation_agent(directory, agent, conversation_key)
        check_user(user_id)
        return await target.status_of(conversation_key, user_id)

    @get("/agents/{agent}/conversations", 404, 503)
    async def conversations(
        agent: str = agent_param(),
        limit: int = Query(default=50, ge=1, le=1000),
        offset: int = Query(
            default=0, ge=0, le=1_000_000_000, description="skip this many (the previous page's next_offset)"
        ),
    ) -> dict[str, Any]:
        """Conversations with an active thread, the most recently active first, a page at a time."""
        rows = await running_agent(directory, agent).conversations(limit + 1, offset)
        page = [
            {**r, "created_at": iso(r["created_at"]), "last_message_at": iso(r["last_message_at"])}
            for r in rows
        ]
        return {"conversations": page[:limit], "next_offset": offset + limit if len(rows) > limit else None}

    # Before the transcript route below: its `{conversation_key:path}` would take ".../memory" as a key.
    @get("/agents/{agent}/conversations/{conversation_key:path}/memory", 400, 404, 503)
    async def conversation_memory(
        agent: str = agent_param(), conversation_key: str = conversation_key_param()
    ) -> dict[str, Any]:
        """The memory inspector: per layer, what the model will see on the next turn."""
        target = conversation_agent(directory, agent, conversation_key)
        return await target.inspect(conversation_key)

    @get("/agents/{agent}/conversations/{conversation_key:path}", 400, 404, 503)
    async def conversation(
        agent: str = agent_param(), conversation_key: str = conversation_key_param()
    ) -> dict[str, Any]:
        """What the model will see next: system prompt, summary, messages, tokens against the threshold;
        `files`: those its tools returned (readable at their `url`)."""
        target = conversation_agent(directory, agent, conversation_key)
        view = await target.next_prompt(conversation_key)
        return {**view, "files": _tool_files(agent, view["messages"])}


async def _known(directory: AgentDirectory, agent: str) -> bool:
    """An agent now (running or not), or one the audit trail knows (its file was removed, say)."""
    if directory.agent(agent) is not None or directory.agent_problem(agent) is not None:
        return True
    return bool(await directory.query_audit(agent, None, None, 1))


def _tool_files(agent: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The files the messages' tool results carry, each once, as a reply lists them."""
    files: dict[str, dict[str, Any]] = {}
    for message in messages:
        for part in message["parts"]:
            for m in part.get("media", ()) if part["kind"] == "tool_result" else ():
                files.setdefault(
                    m["sha256"],
                    {
                        "sha256": m["sha256"],
                        "mime_type": m["mime_type"],
                        "filename": m.get("filename"),
                        "size": m["size"],
                        "url": media_url(agent, m["sha256"]),
                    },
                )
    return list(files.values())


def _run_out(run: dict[str, Any]) -> dict[str, Any]:
    out = {k: run[k] for k in RUN_KEYS}
    out["started_at"] = iso(run["started_at"])
    return out
