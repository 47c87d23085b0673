"""An MCP tool result as the text the model reads, cut at a size cap with a note that says so."""

from __future__ import annotations

import json

import mcp_types as types


def result_text(result: types.CallToolResult, max_chars: int) -> str:
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        elif isinstance(block, types.EmbeddedResource):
            resource = block.resource
            if isinstance(resource, types.TextResourceContents):
                parts.append(resource.text)
            else:
                parts.append(f"[binary resource {resource.uri} ({resource.mime_type or 'unknown type'})]")
        elif isinstance(block, types.ResourceLink):
            parts.append(f"[resource {block.uri}{f' ({block.name})' if block.name else ''}]")
        elif isinstance(block, types.ImageContent | types.AudioContent):
            kind = "image" if isinstance(block, types.ImageContent) else "audio"
            parts.append(f"[{kind} {block.mime_type}, {len(block.data) * 3 // 4} bytes: not shown]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    return cut(("\n".join(parts)), max_chars)


def cut(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return (
        text[:max_chars]
        + f"\n[cut: the result was {len(text)} characters; only the first {max_chars} are shown. "
        "Ask for less (a narrower query, a smaller range) if you need the rest.]"
    )
