"""`media:` in an agent file (images, files and voice a person sends), and what a model takes
(`model.input`), with defaults for well-known models."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from agentd.config.base import Spec
from agentd.config.refs import ModelRef

InputKind = Literal["text", "image", "audio"]
MediaType = Literal["image", "audio", "document", "file"]
MB = 2**20
MIME_PATTERN = r"^[a-z0-9.+-]+/([a-z0-9.+-]+|\*)$"  # type/subtype, or type/* for every subtype


class MediaSpec(Spec):
    """Limits on what is taken, and how each kind reaches a model."""

    # bytes one item may have, and all the items of one message together
    max_bytes: int = Field(default=20 * MB, gt=0)
    max_message_bytes: int = Field(default=40 * MB, gt=0)
    # the kinds taken (a channel's reading: image | audio | document | file); anything else is refused
    allowed: list[MediaType] = ["image", "audio", "document", "file"]
    # MIME types taken beside the kinds' check, e.g. [image/png, application/pdf]; empty: any
    allowed_types: list[str] = Field(
        default=[], json_schema_extra={"items": {"type": "string", "pattern": MIME_PATTERN}}
    )
    download_timeout_s: float = Field(default=30.0, gt=0)
    # days a file is kept after it was sent; 0: until its conversation or its sender is erased
    keep_days: int = Field(default=0, ge=0)
    # a vision model that describes each image: a chat model that cannot see gets the description,
    # marked as one, and older turns and memory read it; unset, a text-only agent says it cannot look
    image_model: ModelRef | None = None
    # provider/model of an OpenAI-compatible /v1/audio/transcriptions, e.g. openai/whisper-1
    transcribe: ModelRef | None = None
    echo_transcript: bool = False  # the reply starts with "heard: <transcript>"
    max_inline_chars: int = Field(default=20_000, gt=0)  # of a text-like document or a PDF's text
    images_in_context: int = Field(default=2, ge=0)  # turns whose images the model sees as images
    # the files a tool returns (an MCP server's images, audio) go to the person with the reply
    send_tool_files: bool = True
    # URLs the webhook and the OpenAI endpoint may fetch a file from (prefixes, e.g. https://cdn.example/)
    allowed_urls: list[str] = []

    @field_validator("allowed_types")
    @classmethod
    def _mime(cls, v: list[str]) -> list[str]:
        for item in v:
            if not re.fullmatch(MIME_PATTERN, item):
                raise ValueError(f"{item!r} is not a MIME type (type/subtype, e.g. image/png or image/*)")
        return v

    def type_allowed(self, mime_type: str) -> bool:
        if not self.allowed_types:
            return True
        major = mime_type.split("/", 1)[0]
        return mime_type in self.allowed_types or f"{major}/*" in self.allowed_types


# Models known to see images, by their name after the provider (prefixes); the others read text only
# unless their file says `model.input`. From the providers' model pages: OpenAI's gpt-4o, gpt-4.1,
# gpt-5, o1/o3/o4; every Claude 3 and 4; Gemini; the usual vision models served by Ollama.
_VISION = re.compile(
    r"^(gpt-4o|gpt-4\.1|gpt-4-turbo|gpt-5|o1|o3|o4|chatgpt-4o|claude-3|claude-(sonnet|opus|haiku)-4|"
    r"claude-[a-z]+-4|gemini|llava|bakllava|llama3\.2-vision|llama4|qwen2\.5vl|qwen2\.5-vl|qwen-vl|qwen3-vl|"
    r"granite3\.2-vision|gemma3|minicpm-v|moondream|pixtral|mistral-small3)"
)
_AUDIO = re.compile(r"^(gpt-4o-audio|gpt-4o-mini-audio|gpt-audio)")


def default_input(ref: str) -> tuple[InputKind, ...]:
    """What a model takes when its file does not say: text, and images or audio for known models."""
    model = ref.partition("/")[2].lower()
    kinds: list[InputKind] = ["text"]
    if _VISION.match(model):
        kinds.append("image")
    if _AUDIO.match(model):
        kinds.append("audio")
    return tuple(kinds)
