"""A message's files, taken in: checked against `media:`'s limits, stored content-addressed, and made
into what the model reads (agentd.messages.MediaPart).

Every item ends as a part of the person's message, so nothing is dropped without a word: an image for
a model that sees, a description (media.image_model) for one that does not, a transcript for a voice
note (media.transcribe), a document's text; an item refused (over a limit, a type not taken) or not
understood is a part too, with a note, and the reply says so to the person first (`Intake.notices`).
What was taken is stored before the turn runs, so a turn that fails keeps it for a retry.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import logging
import mimetypes
import time
from dataclasses import dataclass, field

from PIL import Image

from agentd.config.media import MediaSpec
from agentd.engine.conversation import Conversation
from agentd.engine.documents import readable
from agentd.errors import OperatorError, ProviderError
from agentd.events import Attachment, InboundEvent, MediaTooLarge
from agentd.messages import MediaKind, MediaPart, Message, Part, TextPart, human_size
from agentd.providers.base import CompletionRequest
from agentd.store.base import Store, write_one
from agentd.store.records import AuditRecord, MediaItem
from agentd.store.writes import AppendAudit, PruneMedia, StoreMedia

log = logging.getLogger(__name__)
DESCRIBE = (
    "Describe this image for someone who cannot see it, so they can answer questions about it: what it"
    " shows, and every text, number and date in it, word for word. Say only the description."
)
CANNOT_SEE = "this agent cannot look at images: its model reads text only, and no media.image_model is set"


@dataclass
class Intake:
    """What a message's files became: parts for the person's message, notices for the reply, the
    bytes by sha256 (for this turn's request), audit events for the turn's commit."""

    parts: list[MediaPart] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    blobs: dict[str, bytes] = field(default_factory=dict)
    audit: list[AuditRecord] = field(default_factory=list)
    keeps: bool = True  # the files are stored (the conversation keeps its transcript)

    def message(self, event: InboundEvent) -> Message:
        """The person's message: their text (when they wrote any) and a part per file."""
        parts: list[Part] = [TextPart(text=event.text)] if event.text or not self.parts else []
        parts.extend(self.parts)
        return Message(role="user", parts=tuple(parts), user_id=event.user_id, sent_at=event.sent_at)

    def said_first(self, reply: str) -> str:
        """The reply with what the person must know about their files before it."""
        return "\n".join([*self.notices, reply]) if self.notices else reply


async def take_media(conv: Conversation, event: InboundEvent) -> Intake:
    """Take the event's attachments in (see the module's doc); never raises for a bad file."""
    # a conversation that keeps no transcript (scope none, a stateless call) keeps its files neither
    spec, intake = conv.spec.media, Intake(keeps=conv.memory.keeps_transcript)
    items: list[MediaItem] = []
    budget = spec.max_message_bytes
    for attachment in event.attachments:
        name = attachment.filename or f"a {attachment.kind}"
        data, refusal = await _bytes_of(attachment, spec, budget)
        if data is None:
            part = _refused(attachment, refusal)
            intake.notices.append(f"({name} was not taken: {refusal}.)")
            intake.audit.append(_event("refused", event, part, refusal))
            intake.parts.append(part)
            continue
        budget -= len(data)
        part = await _understood(conv, attachment, data, intake)
        intake.parts.append(part)
        intake.blobs[part.sha256] = data
        items.append(
            MediaItem(
                event.conversation_key,
                event.user_id or "",
                part.sha256,
                part.media,
                part.mime_type,
                part.filename,
                part.size,
                data,
                time.time(),
            )
        )
        intake.audit.append(_event("stored" if intake.keeps else "taken", event, part, part.note))
    if items and intake.keeps:
        await conv.agent.store.write(StoreMedia(items))
    return intake


async def _bytes_of(attachment: Attachment, spec: MediaSpec, budget: int) -> tuple[bytes | None, str]:
    """The attachment's bytes, or None and the limit it broke (named as the agent file names it)."""
    kind = attachment.kind if attachment.kind in ("image", "audio", "document", "file") else "file"
    if (why := not_taken(kind, attachment.mime_type, spec)) is not None:
        return None, why
    # the tighter of the item's limit and what the message's limit leaves, named as the file names it
    if spec.max_bytes <= budget:
        limit, over = spec.max_bytes, f"it is larger than media.max_bytes ({human_size(spec.max_bytes)})"
    else:
        limit = budget
        over = f"the message's files are larger than media.max_message_bytes ({human_size(spec.max_message_bytes)})"
    if attachment.size is not None and attachment.size > limit:
        return None, over
    try:
        if attachment.data is not None:
            data = attachment.data
        elif attachment.download is not None:
            data = await asyncio.wait_for(attachment.download(limit), spec.download_timeout_s)
        else:
            return None, "the channel gave no way to fetch it"
    except MediaTooLarge:
        return None, over
    except TimeoutError:
        return None, f"it did not download within media.download_timeout_s ({spec.download_timeout_s:g} s)"
    except PermissionError as e:  # a source the operator did not allow (media.allowed_urls)
        return None, str(e)
    except Exception as e:  # a platform's failure is said, never a crash of the turn
        log.warning("an attachment could not be downloaded: %s", e)
        return None, f"it could not be downloaded ({type(e).__name__})"
    if len(data) > limit:
        return None, over
    if (why := not_taken(kind, _mime_of(attachment, data), spec)) is not None:
        return None, why
    return data, ""


def not_taken(kind: str, mime_type: str | None, spec: MediaSpec) -> str | None:
    """Why `media:` takes no file of this kind or type (named as the agent file names it), or None; a
    person's files and a tool's alike (agentd.engine.tool_files). An undeclared type passes here."""
    if kind not in spec.allowed:
        return f"this agent takes no {kind} files (media.allowed: {', '.join(spec.allowed)})"
    if mime_type and not spec.type_allowed(mime_type):
        return f"{mime_type} is not taken (media.allowed_types: {', '.join(spec.allowed_types)})"
    return None


def _mime_of(attachment: Attachment, data: bytes) -> str:
    """The MIME type the channel said; else the file name's; else what the bytes look like."""
    if attachment.mime_type and attachment.mime_type != "application/octet-stream":
        return attachment.mime_type.split(";", 1)[0].strip().lower()
    if attachment.filename and (guessed := mimetypes.guess_type(attachment.filename)[0]):
        return guessed
    if data.startswith(b"%PDF-"):
        return "application/pdf"
    try:
        with Image.open(io.BytesIO(data)) as image:
            return Image.MIME.get(image.format or "", "application/octet-stream")
    except (OSError, ValueError):
        return "application/octet-stream"


def readable_image(data: bytes) -> bool:
    """Whether Pillow reads the image (a provider is sent it scaled to its limits, so it must)."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.verify()
        return True
    except (OSError, ValueError, SyntaxError):  # (verify raises SyntaxError for some broken files)
        return False


def _kind_of(attachment: Attachment, mime_type: str) -> MediaKind:
    """The item's kind by its type (a photo sent as a document is still an image)."""
    major = mime_type.split("/", 1)[0]
    if major in ("image", "audio"):
        return "image" if major == "image" else "audio"
    if attachment.kind == "audio":  # a voice note some platforms label video/ogg or octet-stream
        return "audio"
    if major == "text" or attachment.kind == "document" or mime_type == "application/pdf":
        return "document"
    return "file"


def _refused(attachment: Attachment, why: str) -> MediaPart:
    kind: MediaKind = attachment.kind if attachment.kind in ("image", "audio", "document") else "file"  # type: ignore[assignment]
    return MediaPart(
        sha256="",
        media=kind,
        mime_type=attachment.mime_type or "application/octet-stream",
        size=attachment.size or 0,
        filename=attachment.filename,
        note=f"not taken: {why}",
    )


async def _understood(conv: Conversation, attachment: Attachment, data: bytes, intake: Intake) -> MediaPart:
    mime_type = _mime_of(attachment, data)
    part = MediaPart(
        sha256=hashlib.sha256(data).hexdigest(),
        media=_kind_of(attachment, mime_type),
        mime_type=mime_type,
        size=len(data),
        filename=attachment.filename,
    )
    name = part.filename or f"your {part.media}"
    spec = conv.spec.media
    if part.media == "image" and not readable_image(data):
        intake.notices.append(f"({name} is an image agentd cannot read ({mime_type}): it is kept as a file.)")
        return part.model_copy(update={"media": "file", "note": "an image agentd cannot read"})
    if part.media == "image":
        return await _described(conv, part, data, intake, name)
    if part.media == "audio":
        return await _transcribed(conv, part, data, intake)
    if part.media == "document":
        content = readable(data, mime_type, part.filename, spec.max_inline_chars)
        return part if content is None else part.model_copy(update={"text": content, "text_is": "content"})
    return part


async def _described(
    conv: Conversation, part: MediaPart, data: bytes, intake: Intake, name: str
) -> MediaPart:
    described, notice = await with_description(conv, part, data, name)
    if notice is not None:
        intake.notices.append(notice)
    return described


async def with_description(
    conv: Conversation, part: MediaPart, data: bytes, name: str
) -> tuple[MediaPart, str | None]:
    """An image with media.image_model's description when one is set: what a model that cannot see reads,
    and, for one that can, what older turns (past images_in_context) and memory keep of it. Without an
    image model, a model that cannot see is told so; the second item is what to tell the person (None:
    nothing). A tool's images (agentd.engine.tool_files) are described the same way."""
    sees, ref = conv.spec.model.takes("image"), conv.spec.media.image_model
    if ref is None:
        if sees:
            return part, None
        told = f"({CANNOT_SEE[0].upper()}{CANNOT_SEE[1:]}. I got {name}, but not what is in it.)"
        return part.model_copy(update={"note": CANNOT_SEE}), told
    try:
        text = await _describe(conv, ref, part, data)
    except (ProviderError, OperatorError) as e:
        # the chat model sees it anyway otherwise: only the description is missing
        notice = None if sees else f"(I could not look at {name}: the image model failed ({e}).)"
        return part.model_copy(update={"note": f"not described: the image model failed ({e})"}), notice
    return part.model_copy(update={"text": text, "text_is": "description"}), None


async def _describe(conv: Conversation, ref: str, part: MediaPart, data: bytes) -> str:
    """What media.image_model sees in the image."""
    provider, model = conv.agent.resources.providers.resolve(ref)
    ask = Message(role="user", parts=(TextPart(text=DESCRIBE), part))
    request = CompletionRequest(
        model=model, system="", messages=[ask], purpose="describe_image", media={part.sha256: data}
    )
    completion = await provider.complete(request)
    text = completion.message.text.strip()
    if not text:
        raise ProviderError("the image model returned no description", provider=provider.name, model=model)
    return text


async def _transcribed(conv: Conversation, part: MediaPart, data: bytes, intake: Intake) -> MediaPart:
    """A voice note or audio file with its transcript (media.transcribe), or a note saying why not;
    either way it is stored, so it can be transcribed again later."""
    spec, name = conv.spec.media, part.filename or "your voice note"
    if spec.transcribe is None:
        note = "not transcribed: this agent has no media.transcribe"
        intake.notices.append(f"(I cannot listen to {name}: this agent has no speech-to-text model set.)")
        return part.model_copy(update={"note": note})
    provider, model = conv.agent.resources.providers.resolve(spec.transcribe)
    transcribe = getattr(provider, "transcribe", None)
    try:
        if transcribe is None:
            raise OperatorError(
                f"provider {provider.name} has no /audio/transcriptions (use an OpenAI-compatible one)"
            )
        text = await transcribe(model, data, part.filename or _audio_name(part.mime_type), part.mime_type)
    except (ProviderError, OperatorError) as e:
        kept = "It is kept; please" if intake.keeps else "Please"
        intake.notices.append(f"(I could not transcribe {name} ({e}). {kept} send it again or type it.)")
        return part.model_copy(update={"note": f"transcription failed: {e}"})
    if spec.echo_transcript:
        intake.notices.append(f"heard: {text}")
    return part.model_copy(update={"text": text, "text_is": "transcript"})


# a MIME subtype's usual file extension, where the two differ (what an endpoint or a platform reads)
EXTENSIONS = {
    "jpeg": "jpg",
    "svg+xml": "svg",
    "mpeg": "mp3",
    "x-wav": "wav",
    "wave": "wav",
    "x-m4a": "m4a",
    "mp4": "m4a",
}


def file_name(stem: str, mime_type: str) -> str:
    """`stem` with the extension of its type, for a file nobody named."""
    subtype = mime_type.split("/", 1)[-1]
    return f"{stem}.{EXTENSIONS.get(subtype, subtype)}"


def _audio_name(mime_type: str) -> str:
    """A file name the transcription endpoint reads the format from (it goes by the extension)."""
    return file_name("voice", mime_type)


def _event(action: str, event: InboundEvent, part: MediaPart, note: str | None) -> AuditRecord:
    data: dict[str, object] = {
        "sha256": part.sha256 or None,
        "kind": part.media,
        "mime_type": part.mime_type,
        "size": part.size,
    }
    if event.user_id is not None:
        data["user_id"] = event.user_id
    if note:
        data["note"] = note
    return AuditRecord("media", action, event.conversation_key, None, data)


async def prune_media(store: Store, agent: str, keep_days: int, now: float) -> int:
    """media.keep_days: delete the files sent longer ago than that, with an audit event saying how
    many; returns how many (0 and nothing written when the agent keeps files for ever)."""
    if not keep_days:
        return 0
    pruned: int = await write_one(store, PruneMedia(now - keep_days * 86400))
    if pruned:
        record = AuditRecord("media", "prune", None, None, {"files": pruned, "keep_days": keep_days})
        await store.write(AppendAudit(agent, [record], now))
    return pruned
