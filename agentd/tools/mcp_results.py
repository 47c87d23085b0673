"""An MCP tool result as the text the model reads, cut at a size cap with a note that says so, and
the files it carries (images, audio: agentd.tools.base.ToolOutput), which the engine takes in.

A resource link names the tool that reads it (`reader`), when its server has one, so the model can
follow it."""

from __future__ import annotations

import base64
import binascii
import json

import mcp_types as types

from agentd.tools.base import ToolFile, ToolOutput

MEDIA_MAJORS = ("image/", "audio/")  # an embedded blob of these types is a file, not a binary note


def result_output(result: types.CallToolResult, max_chars: int, reader: str | None = None) -> ToolOutput:
    parts: list[str] = []
    files: list[ToolFile] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        elif isinstance(block, types.EmbeddedResource):
            resource = block.resource
            if isinstance(resource, types.BlobResourceContents) and _is_media(resource.mime_type):
                parts.extend(_file(files, resource.blob, resource.mime_type or "", _name(resource.uri)))
            else:
                parts.append(contents_text(resource))
        elif isinstance(block, types.ResourceLink):
            follow = f"; read it with {reader}" if reader else ""
            parts.append(f"[resource {block.uri}{f' ({block.name})' if block.name else ''}{follow}]")
        elif isinstance(block, types.ImageContent | types.AudioContent):
            parts.extend(_file(files, block.data, block.mime_type, None))
    if not parts and not files and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    return ToolOutput(cut(("\n".join(parts)), max_chars), tuple(files))


def _is_media(mime_type: str | None) -> bool:
    return bool(mime_type) and mime_type.lower().startswith(MEDIA_MAJORS)  # type: ignore[union-attr]


def _file(files: list[ToolFile], data: str, mime_type: str, filename: str | None) -> list[str]:
    """Add a base64 file to `files`; the text to say instead when its base64 is broken."""
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return [f"[a {mime_type} file whose data is not valid base64: left out]"]
    files.append(ToolFile(raw, mime_type.split(";", 1)[0].strip().lower(), filename))
    return []


def _name(uri: object) -> str | None:
    """The last segment of a resource's URI, as the file's name (None when it has none)."""
    tail = str(uri).rstrip("/").rsplit("/", 1)[-1]
    return tail if tail and ":" not in tail else None


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
