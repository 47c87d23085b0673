"""A small read-only web page at /ui/: agents, conversations, the memory inspector, the audit trail.

Server-rendered HTML, no build step and no JavaScript: every value passes
through `esc` (html.escape) on its way into a page. The pages only read.

With `http.token` set the pages need the token too, in one of three ways:
the API's `Authorization: Bearer <token>` header; or, for a browser, open
`/ui/?token=<token>` once: the page answers with a redirect that drops the
token from the address and sets an HttpOnly, SameSite=Strict cookie scoped to
/ui, holding an HMAC of the token (not the token). The cookie opens only the
UI, never the JSON API, so a page elsewhere cannot post as you. Every
comparison is constant-time and every refusal is an `auth` audit event.
"""

from __future__ import annotations

import hashlib
import hmac
import html
import json
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from agentd.events import is_conversation_key
from agentd.http.inspector import inspect_conversation
from agentd.messages import MESSAGE_ADAPTER
from agentd.store.runs import list_runs
from agentd.store.transcripts import list_conversations

if TYPE_CHECKING:
    from agentd.engine.runtime import AgentRuntime
    from agentd.http.directory import AgentDirectory

COOKIE = "agentd_ui"
AUDIT_KINDS = ("memory", "command", "compaction", "fold", "config", "auth", "permission", "channel")
HEADERS = {
    # the pages hold private conversations: never cached, never framed, no referrer leaks
    "Cache-Control": "no-store",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}
STYLE = """
body{font:15px/1.45 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;padding:.6rem 1.2rem}header a{color:#fff;margin-right:1.2rem;text-decoration:none}
main{padding:1rem 1.2rem;max-width:78rem}h1{font-size:1.35rem;margin:.2rem 0 1rem}h2{font-size:1.1rem;margin:1.4rem 0 .5rem}
table{border-collapse:collapse;background:#fff;width:100%}th,td{border:1px solid #d8dce3;padding:.3rem .5rem;text-align:left;vertical-align:top}
th{background:#eceff3;font-weight:600}
pre,.text{white-space:pre-wrap;word-break:break-word;margin:0;font:13px/1.4 ui-monospace,monospace}
.layer{background:#fff;border:1px solid #d8dce3;border-left:4px solid #3d6bd6;padding:.6rem .9rem;margin:.7rem 0}
.layer h3{margin:0 0 .5rem;font-size:1rem}dl{margin:0;display:grid;grid-template-columns:max-content 1fr;gap:.3rem 1rem}
dt{font-weight:600}dd{margin:0;min-width:0}dd>.msg:first-child{margin-top:0}
.msg{border-left:3px solid #aab;padding:.25rem .6rem;margin:.3rem 0;background:#fff}.msg .role{font-weight:600;font-size:.85rem;color:#556}
.msg.user{border-color:#3d6bd6}.msg.assistant{border-color:#2e9d5b}.msg.tool{border-color:#b07d12}
.running,.ok{color:#1e7b45}.error,.failed,.stopped{color:#b3261e}.muted{color:#6b7280}
form{margin:.5rem 0 1rem}form label{margin-right:1rem}
"""


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def when(ts: float | None) -> str:
    if ts is None:
        return "—"
    try:
        return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return str(ts)


def agent_href(agent: str) -> str:
    return f"/ui/agents/{quote(agent, safe='')}"


def conversation_href(agent: str, key: str) -> str:
    return f"{agent_href(agent)}/conversations/{quote(key, safe=':')}"


def link(href: str, text: Any) -> str:
    return f'<a href="{esc(href)}">{esc(text)}</a>'


def page(title: str, body: str, status: int = 200) -> HTMLResponse:
    nav = f"<header>{link('/ui/', 'Agents')}{link('/ui/audit', 'Audit')}</header>"
    document = (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{esc(title)} · agentd</title>'
        f'<meta name="viewport" content="width=device-width"><style>{STYLE}</style></head>'
        f"<body>{nav}<main><h1>{esc(title)}</h1>{body}</main></body></html>"
    )
    return HTMLResponse(document, status_code=status, headers=HEADERS)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], empty: str = "none yet") -> str:
    """Rows are cells of finished HTML (escape on the way in)."""
    if not rows:
        return f'<p class="muted">{esc(empty)}</p>'
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str, sort_keys=False)


# -- rendering memory: messages, and whatever a strategy's inspect() describes ----------------


def message_html(message: dict[str, Any]) -> str:
    role = str(message.get("role", "?"))
    who = f" ({message['user_id']})" if message.get("user_id") else ""
    parts = []
    for part in message.get("parts", ()):
        kind = part.get("kind")
        if kind == "text":
            parts.append(f'<div class="text">{esc(part.get("text"))}</div>')
        elif kind == "tool_call":
            call = f"→ {part.get('name')}({compact_json(part.get('arguments', {}))})"
            parts.append(f'<div class="text">{esc(call)}</div>')
        else:
            flag = " (error)" if part.get("is_error") else ""
            result = f"← {part.get('name')}{flag}: {part.get('content')}"
            parts.append(f'<div class="text">{esc(result)}</div>')
    return f'<div class="msg {esc(role)}"><div class="role">{esc(role + who)}</div>{"".join(parts)}</div>'


def messages_html(messages: Sequence[dict[str, Any]]) -> str:
    if not messages:
        return '<p class="muted">no messages</p>'
    return "".join(message_html(m) for m in messages)


def _is_message(value: Any) -> bool:
    return isinstance(value, dict) and "role" in value and "parts" in value


def _is_time(key: str | None, value: Any) -> bool:
    # strategies report times as epoch seconds under "at" / "*_at"
    return bool(key) and (key == "at" or str(key).endswith("_at")) and isinstance(value, int | float)


def value_html(value: Any, key: str | None = None) -> str:
    """Any JSON-like value a strategy reports, readable: messages as a chat, records as a table."""
    if _is_time(key, value):
        return esc(when(value) + " UTC")
    if value is None:
        return '<span class="muted">—</span>'
    if isinstance(value, str):
        return f"<pre>{esc(value)}</pre>" if "\n" in value or len(value) > 120 else esc(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        return esc(value)
    if isinstance(value, list):
        if not value:
            return '<span class="muted">none</span>'
        if all(_is_message(v) for v in value):
            return messages_html(value)
        if all(isinstance(v, dict) for v in value):
            columns: list[str] = []
            for row in value:
                columns += [k for k in row if k not in columns]
            return table(columns, [[cell_html(row.get(c), c) for c in columns] for row in value])
        if all(isinstance(v, str | int | float) and not isinstance(v, bool) for v in value):
            return esc(", ".join(str(v) for v in value))
        return "<ul>" + "".join(f"<li>{value_html(v)}</li>" for v in value) + "</ul>"
    if isinstance(value, dict):
        if not value:
            return '<span class="muted">empty</span>'
        return (
            "<dl>"
            + "".join(f"<dt>{esc(k)}</dt><dd>{value_html(v, str(k))}</dd>" for k, v in value.items())
            + "</dl>"
        )
    return esc(value)


def cell_html(value: Any, key: str | None = None) -> str:
    if isinstance(value, dict | list):
        return f"<pre>{esc(compact_json(value))}</pre>"
    return value_html(value, key)


def layer_html(layer: dict[str, Any]) -> str:
    name, kind = layer.get("layer"), layer.get("kind")
    title = f"{name} ({kind})" if name and name != kind else str(kind or name or "layer")
    rows = "".join(
        f"<dt>{esc(k)}</dt><dd>{value_html(v, k)}</dd>"
        for k, v in layer.items()
        if k not in ("kind", "layer")
    )
    return f'<section class="layer"><h3>{esc(title)}</h3><dl>{rows}</dl></section>'


def memory_summary(memory: dict[str, Any] | None) -> str:
    if not memory:
        return "—"
    strategy = memory.get("strategy")
    if strategy:
        text = strategy.get("kind", "?")
        if strategy.get("layers"):
            text += " (" + " + ".join(str(layer.get("kind")) for layer in strategy["layers"]) + ")"
    else:
        text = f"scope: {memory.get('scope')}"
    if memory.get("persistent"):
        text += ", persistent" + (" per user" if memory.get("persistent_scope") == "user" else "")
    return text


def runs_table(agent: str, runs: Sequence[dict[str, Any]], with_conversation: bool = True) -> str:
    headers = ["started (UTC)", "run", "trigger", "model", "status", "tokens in/out", "ms", "error"]
    rows = []
    for r in reversed(runs):  # newest first
        tokens = f"{r['input_tokens']}{'~' if r['tokens_estimated'] else ''} / {r['output_tokens']}"
        row = [
            esc(when(r["started_at"])),
            f'<span title="{esc(r["id"])}">{esc(r["id"][:12])}</span>'
            + (
                f'<br><span class="muted">parent {esc(r["parent_run_id"][:12])}</span>'
                if r["parent_run_id"]
                else ""
            ),
            esc(r["trigger"]),
            esc(r["model"]),
            f'<span class="{esc(r["status"])}">{esc(r["status"])}</span>',
            esc(tokens),
            esc(round(r["duration_ms"] or 0)),
            esc(r["error"] or ""),
        ]
        if with_conversation:
            key = r["conversation_key"]
            row.insert(2, link(conversation_href(agent, key), key) if key else "—")
        rows.append(row)
    if with_conversation:
        headers.insert(2, "conversation")
    return table(headers, rows, "no runs yet")


# -- access --------------------------------------------------------------------------------------


def session_value(token: str) -> str:
    """What the cookie holds: derived from the token, so the token itself is never stored by the browser."""
    return hmac.new(token.encode(), b"agentd ui session v1", hashlib.sha256).hexdigest()


def _matches(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


async def check_access(request: Request, directory: AgentDirectory) -> Response | None:
    """None when the request may see the UI; else the response to send (a cookie redirect or a 401)."""
    token = directory.token
    if token is None:
        return None
    scheme, _, bearer = request.headers.get("authorization", "").partition(" ")
    query = request.query_params.get("token")
    cookie = request.cookies.get(COOKIE)
    if scheme.lower() == "bearer" and bearer:
        if _matches(bearer, token):
            return None
        reason = "wrong token"
    elif query is not None:
        if _matches(query, token):
            # trade the token in the address for a cookie, then drop it from the address bar
            target = request.url.remove_query_params("token")
            location = target.path + (f"?{target.query}" if target.query else "")
            redirect = RedirectResponse(location, status_code=303, headers=HEADERS)
            redirect.set_cookie(COOKIE, session_value(token), path="/ui", httponly=True, samesite="strict")
            return redirect
        reason = "wrong token"
    elif cookie is not None:
        if _matches(cookie, session_value(token)):
            return None
        reason = "stale session cookie"
    else:
        reason = "missing token"
    client = request.client.host if request.client else None
    await directory.audit_auth_failure(request.url.path, reason, client)
    body = (
        f"<p>{esc(reason.capitalize())}. This daemon has <code>http.token</code> set: open "
        "<code>/ui/?token=&lt;http.token&gt;</code> once (the token is traded for an HttpOnly cookie and "
        "removed from the address), or send <code>Authorization: Bearer &lt;http.token&gt;</code>.</p>"
    )
    return page("Token needed", body, status=401)


# -- the pages -------------------------------------------------------------------------------------


def add_ui_routes(app: FastAPI, directory: AgentDirectory) -> None:
    """Adds GET /ui/, /ui/agents/{agent}, /ui/agents/{agent}/conversations/{key} and /ui/audit."""

    Handler = Callable[..., Awaitable[Response]]

    def guarded(path: str) -> Callable[[Handler], Handler]:
        def register(handler: Handler) -> Handler:
            async def endpoint(request: Request) -> Response:
                denied = await check_access(request, directory)
                if denied is not None:
                    return denied
                return await handler(request, **request.path_params)

            app.add_api_route(path, endpoint, methods=["GET"], include_in_schema=False)
            return handler

        return register

    def running(agent: str) -> AgentRuntime | Response:
        names = {a["name"] for a in directory.describe_agents()}
        runtime = directory.runtime(agent)
        if agent not in names:
            return page("Not found", f"<p>No agent named {esc(agent)}.</p>", 404)
        if runtime is None or runtime.status != "running":
            status = runtime.status if runtime else "not running"
            return page("Unavailable", f"<p>Agent {esc(agent)} is {esc(status)}.</p>", 503)
        return runtime

    @guarded("/ui/")
    async def agents_page(request: Request) -> Response:
        rows = []
        for a in directory.describe_agents():
            channels = ", ".join(
                f"{c['name']}: {c['status']}" + (f" ({c['error']})" if c.get("error") else "")
                for c in a["channels"]
            )
            rows.append(
                [
                    link(agent_href(a["name"]), a["name"]),
                    f'<span class="{esc(a["status"])}">{esc(a["status"])}</span>',
                    esc(a["model"] or "—"),
                    esc(memory_summary(a["memory"])),
                    esc(channels or "—"),
                    f'<span class="error">{esc(a["last_error"])}</span>' if a["last_error"] else "",
                ]
            )
        body = table(
            ["agent", "status", "model", "memory", "channels", "last error"], rows, "no agents loaded"
        )
        return page("Agents", body)

    @guarded("/ui/agents/{agent}")
    async def agent_page(request: Request, agent: str) -> Response:
        runtime = running(agent)
        if isinstance(runtime, Response):
            return runtime
        conversations = await runtime.store.read(lambda conn: list_conversations(conn, 200))
        runs = await runtime.store.read(lambda conn: list_runs(conn, None, 50))
        rows = [
            [
                link(conversation_href(agent, str(c["conversation_key"])), c["conversation_key"]),
                esc(c["messages"]),
                esc(when(cast(float | None, c["created_at"]))),
                esc(when(cast(float | None, c["last_message_at"]))),
            ]
            for c in conversations
        ]
        body = (
            f'<p class="muted">model {esc(runtime.spec.model.name)} · '
            f"{link('/ui/audit?agent=' + quote(agent, safe=''), 'audit trail')}</p>"
            "<h2>Conversations</h2>"
            + table(
                ["conversation", "messages", "started (UTC)", "last message (UTC)"],
                rows,
                "no conversations yet",
            )
            + "<h2>Recent runs</h2>"
            + runs_table(agent, runs)
        )
        return page(f"Agent {agent}", body)

    @guarded("/ui/agents/{agent}/conversations/{conversation_key:path}")
    async def conversation_page(request: Request, agent: str, conversation_key: str) -> Response:
        runtime = running(agent)
        if isinstance(runtime, Response):
            return runtime
        if not is_conversation_key(conversation_key):
            return page(
                "Bad conversation key", f"<p>Not a conversation key: {esc(conversation_key)}</p>", 400
            )
        inspected = await inspect_conversation(runtime, conversation_key)
        thread = await runtime.threads.get(conversation_key)
        transcript = [
            MESSAGE_ADAPTER.dump_python(m.message, mode="json", exclude_none=True) for m in thread.messages
        ]
        runs = await runtime.store.read(lambda conn: list_runs(conn, conversation_key, 20))
        persistent = inspected.get("persistent")
        api = f"/agents/{quote(agent, safe='')}/conversations/{quote(conversation_key, safe=':')}/memory"
        body = (
            f"<p>{link(agent_href(agent), '← ' + agent)} · strategy <strong>{esc(inspected['strategy'])}</strong> · "
            f"thread {esc(inspected['thread_id'] if inspected['thread_id'] is not None else 'none yet')} · "
            f"JSON: <code>{esc(api)}</code></p>"
            '<h2 id="inspector">What the model sees next</h2>'
            + "".join(layer_html(layer) for layer in inspected["layers"])
            + (
                f'<section class="layer"><h3>persistent memory</h3>{value_html(persistent)}</section>'
                if persistent
                else ""
            )
            + '<h2 id="transcript">Transcript</h2>'
            + (
                f"<p><strong>Summary of compacted turns</strong></p><pre>{esc(thread.summary)}</pre>"
                if thread.summary
                else ""
            )
            + messages_html(transcript)
            + "<h2>Runs</h2>"
            + runs_table(agent, runs, with_conversation=False)
        )
        return page(f"Conversation {conversation_key}", body)

    @guarded("/ui/audit")
    async def audit_page(request: Request) -> Response:
        names = [a["name"] for a in directory.describe_agents()]
        agent = request.query_params.get("agent") or None
        kind = request.query_params.get("kind") or None
        if agent is not None and agent not in names:
            return page("Not found", f"<p>No agent named {esc(agent)}.</p>", 404)
        events = await directory.query_audit(agent, kind, None, 200)
        options = "".join(
            f'<option value="{esc(n)}"{" selected" if n == agent else ""}>{esc(n)}</option>' for n in names
        )
        kinds = "".join(f'<option value="{esc(k)}">' for k in AUDIT_KINDS)
        form = (
            '<form method="get" action="/ui/audit">'
            f'<label>agent <select name="agent"><option value="">all</option>{options}</select></label>'
            f'<label>kind <input name="kind" list="kinds" value="{esc(kind)}" size="14"></label>'
            f'<datalist id="kinds">{kinds}</datalist><button type="submit">Filter</button></form>'
        )
        rows = []
        for e in reversed(events):  # newest first
            key = e["conversation_key"]
            known = e["agent"] in names and key
            rows.append(
                [
                    esc(when(e["ts"])),
                    link(agent_href(e["agent"]), e["agent"]) if e["agent"] in names else esc(e["agent"]),
                    esc(e["kind"]),
                    esc(e["action"]),
                    link(conversation_href(e["agent"], key), key) if known else esc(key or "—"),
                    f"<pre>{esc(compact_json(e['data']))}</pre>",
                ]
            )
        body = form + table(
            ["time (UTC)", "agent", "kind", "action", "conversation", "data"], rows, "no events match"
        )
        return page("Audit trail", body)
