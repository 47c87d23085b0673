"""The /ui/ pages: each route gathers a context and names its template; nothing here writes HTML."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from fastapi import FastAPI, Request
from fastapi.responses import Response

from agentd.events import is_conversation_key
from agentd.http.ui.access import check_access
from agentd.http.ui.paging import AUDIT_PAGE, audit_href, audit_page_number, audit_page_of
from agentd.http.ui.persistent import persistent_keys, whose
from agentd.http.ui.render import HEADERS, Problem, auto_refresh, reload_links, render, render_problem
from agentd.http.ui.thumbs import thumbnail
from agentd.http.ui.views import agent_path, conversation_path
from agentd.store.records import AUDIT_KINDS

if TYPE_CHECKING:
    from agentd.engine.agent import Agent
    from agentd.http.directory import AgentDirectory

Page = tuple[str, dict[str, Any]]  # a template's name and its context
Handler = Callable[..., Awaitable[Page]]


def add_ui_routes(app: FastAPI, directory: AgentDirectory) -> None:
    """Adds GET /ui/, /ui/agents/{agent}, /ui/agents/{agent}/conversations/{key} (and …/memories/{name}
    for one persistent value) and /ui/audit."""

    def page(path: str) -> Callable[[Handler], Handler]:
        def register(handler: Handler) -> Handler:
            async def endpoint(request: Request) -> Response:
                denied = await check_access(request, directory)
                if denied is not None:
                    return denied
                try:
                    refresh = auto_refresh(request)
                    template, context = await handler(request, **request.path_params)
                except Problem as problem:
                    return render_problem(request, problem)
                context |= reload_links(request, refresh) | {"api_needs_token": directory.token is not None}
                return render(request, template, context)

            app.add_api_route(path, endpoint, methods=["GET"], include_in_schema=False)
            return handler

        return register

    def known(agent: str) -> None:
        if agent not in {a["name"] for a in directory.describe_agents()}:
            raise Problem(404, "Not found", f"No agent named {agent}.")

    def running(agent: str) -> Agent:
        known(agent)
        runtime = directory.agent(agent)
        if runtime is None or runtime.status != "running":
            status = runtime.status if runtime else "not running"
            # why: a rejected file's errors (file:line:col), a start that failed
            reason = directory.agent_problem(agent) or (runtime.lifecycle.last_error if runtime else None)
            raise Problem(
                503, "Unavailable", f"Agent {agent} is {status}" + (f": {reason}" if reason else ".")
            )
        return runtime

    def described(agent: str) -> dict[str, Any]:
        return next((a for a in directory.describe_agents() if a["name"] == agent), {})

    @page("/ui/")
    async def agents_page(request: Request) -> Page:
        return "agents.html", {"agents": directory.describe_agents(), "api": ["/agents"]}

    @page("/ui/agents/{agent}")
    async def agent_page(request: Request, agent: str) -> Page:
        runtime = running(agent)
        conversations = await runtime.conversations(200)
        runs = await runtime.runs(None, 50)
        return "agent.html", {
            "api": [f"{agent_path(agent)}/runs"],
            "agent": agent,
            "model": runtime.spec.model.name,
            "conversations": conversations,
            "runs": runs,
            "approvals": await runtime.approvals(),
            "warnings": described(agent).get("warnings") or [],
        }

    def conversation(agent: str, conversation_key: str) -> Agent:
        runtime = running(agent)
        if not is_conversation_key(conversation_key):
            raise Problem(400, "Bad conversation key", f"Not a conversation key: {conversation_key}")
        return runtime

    # Before the conversation page: its `{conversation_key:path}` would take ".../memories/x" as a key.
    @page("/ui/agents/{agent}/conversations/{conversation_key:path}/memories/{name}")
    async def memory_page(request: Request, agent: str, conversation_key: str, name: str) -> Page:
        runtime = conversation(agent, conversation_key)
        if not runtime.spec.memory.persistent:
            raise Problem(404, "Not found", f"Agent {agent} has no persistent memory.")
        user = request.query_params.get("user") or None
        value = await runtime.memory_value(conversation_key, name, user)
        if value is None:
            raise Problem(404, "Not found", f"No memory named {name} ({whose(runtime, user)}).")
        return "memory.html", {
            "agent": agent,
            "key": conversation_key,
            "name": name,
            "whose": whose(runtime, user),
            "value": value,
        }

    # Also before the conversation page: an image's thumbnail beside its message in the transcript.
    async def media_thumbnail(request: Request) -> Response:
        denied = await check_access(request, directory)
        if denied is not None:
            return denied
        agent, key = request.path_params["agent"], request.path_params["conversation_key"]
        runtime = directory.agent(agent)
        found = None
        if runtime is not None and runtime.status == "running" and is_conversation_key(key):
            data = await runtime.media_file(key, request.path_params["sha256"])
            found = None if data is None else thumbnail(data)
        if found is None:
            return Response(b"no such image", status_code=404, media_type="text/plain", headers=HEADERS)
        return Response(found[0], media_type=found[1], headers=HEADERS)

    app.add_api_route(
        "/ui/agents/{agent}/conversations/{conversation_key:path}/media/{sha256}",
        media_thumbnail,
        methods=["GET"],
        include_in_schema=False,
    )

    @page("/ui/agents/{agent}/conversations/{conversation_key:path}")
    async def conversation_page(request: Request, agent: str, conversation_key: str) -> Page:
        runtime = conversation(agent, conversation_key)
        inspected = await runtime.inspect(conversation_key)
        upcoming = await runtime.next_prompt(conversation_key)
        transcript = await runtime.transcript(conversation_key)
        runs = await runtime.runs(conversation_key, 20)
        approvals = [a for a in await runtime.approvals() if a["conversation_key"] == conversation_key]
        api = conversation_path(agent, conversation_key)
        return "conversation.html", {
            "approvals": approvals,
            "api": [api, f"{api}/memory"],
            "agent": agent,
            "key": conversation_key,
            "inspected": inspected,
            "system": upcoming["system"],
            "memory": persistent_keys(runtime, conversation_key, transcript),
            "summary": upcoming["summary"],
            "transcript": transcript,
            "runs": runs,
        }

    @page("/ui/audit")
    async def audit_page(request: Request) -> Page:
        names = [a["name"] for a in directory.describe_agents()]
        agent = request.query_params.get("agent") or None
        kind = request.query_params.get("kind") or None
        if agent is not None:
            known(agent)
        if kind is not None and kind not in AUDIT_KINDS:
            raise Problem(
                400, "Unknown kind", f"Unknown audit kind {kind}: expected one of {', '.join(AUDIT_KINDS)}."
            )
        number = audit_page_number(request.query_params.get("page"))
        # newest last, as GET /audit lists them; page 1 is the newest AUDIT_PAGE, page 2 the ones before
        newest = await directory.query_audit(agent, kind, None, number * AUDIT_PAGE + 1)
        events, older = audit_page_of(newest, number)
        filters = {name: value for name, value in (("agent", agent), ("kind", kind)) if value}
        query = urlencode(filters)
        return "audit.html", {
            "api": ["/audit" + (f"?{query}" if query else "")],
            "names": names,
            "agent": agent,
            "kind": kind,
            "kinds": AUDIT_KINDS,
            "events": events,
            "page": number,
            "older_href": audit_href(filters, number + 1) if older else None,
            "newer_href": audit_href(filters, number - 1) if number > 1 else None,
        }
