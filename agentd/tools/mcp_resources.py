"""A server's resources offered as two tools: `<server>__list_resources` and `<server>__read_resource`.

A server that has resources (it declares the capability — the SDK's servers
all do — and lists a resource or a template when it connects) gets both, under the policy
like any of its tools (`files.read_resource` in allow, deny or ask) and with
the same limits as a tool call (agentd.tools.mcp_calls). A resource link in a
tool's result names the reading tool, so the model can follow it. A server
that lists a tool of the same name keeps its own: agentd's is then not
offered.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp import Client
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from agentd.tools.mcp_calls import McpServer, limited
from agentd.tools.mcp_remote import RemoteTool
from agentd.tools.mcp_results import contents_text, cut

LIST, READ = "list_resources", "read_resource"
MAX_LIST_PAGES = 20
READ_ONLY = (("readOnlyHint", True),)
RESOURCE_TOOLS = (
    RemoteTool(
        LIST,
        "List the resources (documents, files, records) this server offers, with their URIs; "
        "URI templates name the families of resources it can read.",
        {"type": "object", "properties": {}},
        READ_ONLY,
    ),
    RemoteTool(
        READ,
        "Read one resource of this server by its URI (from list_resources, a template, or a link in "
        "a tool's result).",
        {
            "type": "object",
            "properties": {"uri": {"type": "string", "description": "The resource's URI"}},
            "required": ["uri"],
        },
        READ_ONLY,
    ),
)


async def has_resources(client: Client) -> bool:
    if client.server_capabilities.resources is None:
        return False
    try:
        listed = await client.list_resources(cache_mode="bypass")
        if listed.resources:
            return True
        return bool((await client.list_resource_templates(cache_mode="bypass")).resource_templates)
    except (MCPError, ValidationError):
        return False  # a capability it does not really serve: its tools are still offered


def resource_tools(listed: list[RemoteTool]) -> list[RemoteTool]:
    """The resource tools a server with resources gets: those whose name it does not use itself."""
    taken = {t.name for t in listed}
    return [t for t in RESOURCE_TOOLS if t.name not in taken]


async def call_resource_tool(server: McpServer, tool: str, arguments: dict[str, Any]) -> str:
    if tool == LIST:
        text = await limited(server, LIST, _list)
    else:
        uri = str(arguments.get("uri") or "")

        async def read(client: Client, left: float, progressed: ProgressFnT) -> types.ReadResourceResult:
            return await client.read_resource(uri, cache_mode="bypass")

        result = await limited(server, READ, read)
        text = "\n".join(contents_text(c) for c in result.contents)
    return cut(text, server.spec.max_result_chars)


async def _list(client: Client, left: float, progressed: ProgressFnT) -> str:
    lines: list[str] = []
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        page = await client.list_resources(cursor=cursor, cache_mode="bypass")
        lines += [_line(r.uri, r.name, r.mime_type, r.description) for r in page.resources]
        if (cursor := page.next_cursor) is None:
            break
    cursor = None
    for _ in range(MAX_LIST_PAGES):
        try:
            templates = await client.list_resource_templates(cursor=cursor, cache_mode="bypass")
        except Exception:
            break  # templates are optional to a server; the resources themselves were listed
        lines += [
            "template " + _line(t.uri_template, t.name, t.mime_type, t.description)
            for t in templates.resource_templates
        ]
        if (cursor := templates.next_cursor) is None:
            break
    return "\n".join(lines) or "(no resources)"


def _line(uri: str, name: str, mime_type: str | None, description: str | None) -> str:
    kind = f" ({mime_type})" if mime_type else ""
    about = f": {description}" if description else ""
    return f"{uri} {name}{kind}{about}"
