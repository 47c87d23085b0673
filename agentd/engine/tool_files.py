"""Files a tool returned (agentd.tools.base.ToolOutput: an MCP server's images and audio), taken in as a
person's files are (agentd.engine.media), and sent on with the reply.

Each file is checked against `media:` (the kinds and types taken, media.max_bytes, and
media.max_message_bytes for all the files of one result); one refused is said in the tool's result
text, so the model knows, and nothing else happens to it. One taken is stored content-addressed under
the conversation and the person the call serves (so their erasure, their export and media.keep_days
cover it; audited `media/stored` with `source: tool`), described by media.image_model when one is set
(what a model that cannot see reads), and carried by the tool result as a MediaPart reference. Its
bytes stay in `fresh` for the rest of the turn, so showing it to the model reads nothing again.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass

from agentd.config.media import MediaSpec
from agentd.engine.conversation import Conversation
from agentd.engine.media import file_name, not_taken, readable_image, with_description
from agentd.events import OutgoingFile
from agentd.messages import MediaKind, MediaPart, Message, human_size
from agentd.store.queries import MediaBlobs
from agentd.store.records import AuditRecord, MediaItem
from agentd.store.writes import StoreMedia
from agentd.tools.base import ToolCall, ToolFile


@dataclass
class ToolFiles:
    """Takes in the files of one run's tool results (see the module's doc)."""

    conv: Conversation
    caller: ToolCall
    audit: list[AuditRecord]
    fresh: MutableMapping[str, bytes]  # this turn's files by sha256 (the person's too)

    async def take(self, tool: str, files: Sequence[ToolFile]) -> tuple[tuple[MediaPart, ...], list[str]]:
        """The parts for the tool's result, and a line for its text per file refused."""
        spec, keeps = self.conv.spec.media, self.conv.memory.keeps_transcript
        parts: list[MediaPart] = []
        refused: list[str] = []
        items: list[MediaItem] = []
        left = spec.max_message_bytes
        for file in files:
            kind = _kind_of(file)
            name = file.filename or f"the {kind}"
            if (why := _refusal(file, kind, left, spec)) is not None:
                refused.append(
                    f"[{name} ({file.mime_type}, {human_size(len(file.data))}) was not taken: {why}]"
                )
                self.audit.append(self._event("refused", tool, kind, file, None, why))
                continue
            left -= len(file.data)
            sha = hashlib.sha256(file.data).hexdigest()
            part = MediaPart(
                sha256=sha, media=kind, mime_type=file.mime_type, size=len(file.data), filename=file.filename
            )
            if kind == "image" and not readable_image(file.data):
                part = part.model_copy(update={"media": "file", "note": "an image agentd cannot read"})
            elif kind == "image":
                part, _ = await with_description(self.conv, part, file.data, name)
            parts.append(part)
            self.fresh[sha] = file.data
            user = self.caller.user_id or ""
            items.append(
                MediaItem(
                    self.caller.conversation_key,
                    user,
                    sha,
                    part.media,
                    part.mime_type,
                    part.filename,
                    part.size,
                    file.data,
                    time.time(),
                )
            )
            self.audit.append(
                self._event("stored" if keeps else "taken", tool, part.media, file, sha, part.note)
            )
        if items and keeps:
            await self.conv.agent.store.write(StoreMedia(items))
        return tuple(parts), refused

    def _event(
        self, action: str, tool: str, kind: str, file: ToolFile, sha: str | None, note: str | None
    ) -> AuditRecord:
        data: dict[str, object] = {
            "sha256": sha,
            "kind": kind,
            "mime_type": file.mime_type,
            "size": len(file.data),
            "source": "tool",
            "tool": tool,
        }
        if self.caller.user_id is not None:
            data["user_id"] = self.caller.user_id
        if note:
            data["note"] = note
        return AuditRecord("media", action, self.caller.conversation_key, self.caller.run_id, data)


def _kind_of(file: ToolFile) -> MediaKind:
    major = file.mime_type.split("/", 1)[0]
    return "image" if major == "image" else "audio" if major == "audio" else "file"


def _refusal(file: ToolFile, kind: str, left: int, spec: MediaSpec) -> str | None:
    """Why media: does not take the file (named as the agent file names it), or None."""
    if (why := not_taken(kind, file.mime_type, spec)) is not None:
        return why
    if len(file.data) > spec.max_bytes:
        return f"it is larger than media.max_bytes ({human_size(spec.max_bytes)})"
    if len(file.data) > left:
        return f"the result's files are larger than media.max_message_bytes ({human_size(spec.max_message_bytes)})"
    return None


async def reply_files(
    conv: Conversation, new: Sequence[Message], fresh: Mapping[str, bytes]
) -> tuple[OutgoingFile, ...]:
    """The files the run's tool results carry, to send with the reply (media.send_tool_files), each once;
    bytes this turn took are at hand, the others (a run resumed after an approval) are read."""
    if not conv.spec.media.send_tool_files:
        return ()
    parts: dict[str, MediaPart] = {}
    for message in new:
        for result in message.tool_results:
            for part in result.media:
                parts.setdefault(part.sha256, part)
    if not parts:
        return ()
    blobs = {sha: fresh[sha] for sha in parts if sha in fresh}
    if missing := [sha for sha in parts if sha not in blobs]:
        stored: dict[str, bytes] = await conv.agent.store.read(MediaBlobs(conv.key, missing))
        blobs.update(stored)
    return tuple(
        OutgoingFile(part.filename or _file_name(part, i), part.mime_type, blobs[sha], sha)
        for i, (sha, part) in enumerate(parts.items(), 1)
        if sha in blobs
    )


def _file_name(part: MediaPart, n: int) -> str:
    """A name for a file its tool named not (platforms want one, and read the type from it)."""
    return file_name(f"{part.media}-{n}", part.mime_type)
