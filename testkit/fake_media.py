"""The image and audio rules of the fake model servers (testkit.fake_llm), as the real APIs document
them: an OpenAI `image_url` must be a readable image at a data URL (or an http URL); an Anthropic
`image` block a base64 source of JPEG, PNG, GIF or WebP, at most 5 MB of base64 and 8000 px a side;
`/v1/audio/transcriptions` a multipart form with a `file` and a `model`."""

from __future__ import annotations

import base64
import binascii
import io
from typing import Any

from PIL import Image

ANTHROPIC_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
ANTHROPIC_MAX_BASE64 = 5 * 2**20
ANTHROPIC_MAX_SIDE = 8000
# what OpenAI's transcription endpoint reads, by the file's extension
AUDIO_SUFFIXES = ("flac", "mp3", "mp4", "mpeg", "mpga", "m4a", "ogg", "oga", "wav", "webm")


def image_size(data: bytes) -> tuple[int, int] | None:
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.verify()
        with Image.open(io.BytesIO(data)) as image:
            return image.size
    except (OSError, ValueError, SyntaxError):
        return None


def openai_part_problem(where: str, part: Any) -> str | None:
    """What OpenAI would say of one content part of a user message (None: it is fine)."""
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "text":
        return None if isinstance(part.get("text"), str) else f"{where}.text must be a string"
    if kind == "image_url":
        url = (part.get("image_url") or {}).get("url")
        if not isinstance(url, str):
            return f"{where}.image_url.url: a string is required"
        if url.startswith(("http://", "https://")):
            return None
        head, _, data = url.partition(",")
        if not head.startswith("data:image/") or not head.endswith(";base64"):
            return f"{where}: Invalid image URL: expected a base64 data URL or an http(s) URL"
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            return f"{where}: Invalid base64 image"
        if image_size(raw) is None:
            return f"{where}: You uploaded an unsupported image. Please make sure your image is valid."
        return None
    if kind == "input_audio":
        audio = part.get("input_audio") or {}
        return None if isinstance(audio.get("data"), str) else f"{where}.input_audio.data is required"
    return f"{where}: Invalid value: {kind!r}. Supported values are: 'text', 'image_url', and 'input_audio'."


def anthropic_image_problem(where: str, block: dict[str, Any]) -> str | None:
    source = block.get("source") or {}
    if source.get("type") != "base64":
        return None if source.get("type") == "url" else f"{where}.source.type: expected base64 or url"
    if source.get("media_type") not in ANTHROPIC_TYPES:
        return f"{where}.source.media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'"
    data = source.get("data")
    if not isinstance(data, str):
        return f"{where}.source.data: Field required"
    if len(data) > ANTHROPIC_MAX_BASE64:
        return f"{where}.source.base64: image exceeds 5 MB maximum: {len(data)} bytes > {ANTHROPIC_MAX_BASE64} bytes"
    try:
        size = image_size(base64.b64decode(data, validate=True))
    except (binascii.Error, ValueError):
        size = None
    if size is None:
        return f"{where}.source.base64.data: The image was specified using the image/... media type, but it could not be read"
    if max(size) > ANTHROPIC_MAX_SIDE:
        return f"{where}.source.base64.data: At least one of the image dimensions exceed max allowed size: 8000 pixels"
    return None


def tool_result_problem(where: str, content: Any) -> str | None:
    """What Anthropic would say of a `tool_result` block's content: a string, or a list of non-empty
    text blocks and image blocks (None: it is fine)."""
    if content is None or isinstance(content, str):
        return None
    if not isinstance(content, list):
        return f"{where}: Input should be a valid string or list"
    for k, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and not block.get("text"):
            return f"{where}.{k}: text content blocks must be non-empty"
        if kind == "image":
            if problem := anthropic_image_problem(f"{where}.{k}", block):
                return problem
        elif kind not in ("text", "search_result", "document"):
            return f"{where}.{k}: Input tag {kind!r} does not match any of the expected tags"
    return None


def images_in(body: dict[str, Any]) -> list[bytes]:
    """The images a recorded chat request carried (either API's shape, a tool result's too), in order."""
    found: list[bytes] = []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        found.extend(_images_of(content))
    return found


def audio_in(body: dict[str, Any]) -> list[tuple[bytes, str]]:
    """The audio an OpenAI request carried in `input_audio` parts, as (bytes, format)."""
    found: list[tuple[bytes, str]] = []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else []:
            if part.get("type") == "input_audio":
                audio = part["input_audio"]
                found.append((base64.b64decode(audio["data"]), audio.get("format")))
    return found


def _images_of(content: Any) -> list[bytes]:
    found: list[bytes] = []
    for part in content if isinstance(content, list) else []:
        if part.get("type") == "image_url":
            found.append(base64.b64decode(part["image_url"]["url"].partition(",")[2]))
        elif part.get("type") == "image" and part["source"].get("type") == "base64":
            found.append(base64.b64decode(part["source"]["data"]))
        elif part.get("type") == "tool_result":
            found.extend(_images_of(part.get("content")))
    return found
