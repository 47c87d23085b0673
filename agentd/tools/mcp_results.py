"""An MCP tool result as the text the model reads, cut at a size cap with a note that says so.

A resource link names the tool that reads it (`reader`), when its server has one, so the model can
follow it."""

from __future__ import annotations

import json

import mcp_types as types


def result_text(result: types.CallToolResult, max_chars: int, reader: str | None = None) -> str:
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        elif isinstance(block, types.EmbeddedResource):
            parts.append(contents_text(block.resource))
        elif isinstance(block, types.ResourceLink):
            follow = f"; read it with {reader}" if reader else ""
            parts.append(f"[resource {block.uri}{f' ({block.name})' if block.name else ''}{follow}]")
        elif isinstance(block, types.ImageContent | types.AudioContent):
            kind = "image" if isinstance(block, types.ImageContent) else "audio"
            parts.append(f"[{kind} {block.mime_type}, {len(block.data) * 3 // 4} bytes: not shown]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    return cut(("\n".join(parts)), max_chars)


def contents_text(contents: types.TextResourceContents | types.BlobResourceContents) -> str:
    if isinstance(contents, types.TextResourceContents):
        return contents.text
    return f"[binary resource {contents.uri} ({contents.mime_type or 'unknown type'})]"


def cut(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return (
        text[:max_chars]
        + f"\n[cut: the result was {len(text)} characters; only the first {max_chars} are shown. "
        "Ask for less (a narrower query, a smaller range) if you need the rest.]"
    )
