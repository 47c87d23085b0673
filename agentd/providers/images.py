"""Images made to fit what a provider documents it takes, with Pillow: the longest side, the bytes,
the formats. An image already within the limits is sent as it came (no re-encoding)."""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Mapping
from dataclasses import dataclass

from PIL import Image

from agentd.errors import ProviderError
from agentd.messages import MediaPart


@dataclass(frozen=True, slots=True)
class ImageLimits:
    max_side: int  # pixels of the longest side the provider uses (it scales larger ones down itself)
    max_bytes: int  # of the file as sent, before base64
    formats: frozenset[str]  # MIME types taken as they are


# OpenAI vision guide: high detail scales an image to fit 2048x2048 first; up to 20 MB per image;
# PNG, JPEG, WEBP and non-animated GIF.
OPENAI = ImageLimits(2048, 20 * 2**20, frozenset({"image/png", "image/jpeg", "image/webp", "image/gif"}))
# Anthropic vision docs: a long edge over 1568 px is scaled down server-side; an image's base64 may be
# at most 5 MB (so ~3.75 MB of bytes); JPEG, PNG, GIF, WebP.
ANTHROPIC = ImageLimits(1568, 3_750_000, frozenset({"image/png", "image/jpeg", "image/webp", "image/gif"}))


def fit(data: bytes, mime_type: str, limits: ImageLimits, *, provider: str, model: str) -> tuple[bytes, str]:
    """The image as (bytes, MIME type) within `limits`: scaled down to the longest side, re-encoded as
    JPEG (PNG when it has transparency) when it is too large or in a format the provider does not take."""
    try:
        image = Image.open(io.BytesIO(data))
        width, height = image.size
    except (OSError, ValueError) as e:
        raise ProviderError(f"an image could not be read ({e})", provider=provider, model=model) from None
    if (
        mime_type in limits.formats
        and max(width, height) <= limits.max_side
        and len(data) <= limits.max_bytes
    ):
        return data, mime_type
    scale = min(1.0, limits.max_side / max(width, height))
    quality = 85
    while True:
        size = (max(1, round(width * scale)), max(1, round(height * scale)))
        out, out_type = _encode(image, size, quality)
        if len(out) <= limits.max_bytes or size == (1, 1):
            return out, out_type
        scale, quality = scale * 0.75, max(50, quality - 10)


def _encode(image: Image.Image, size: tuple[int, int], quality: int) -> tuple[bytes, str]:
    frame = image.convert("RGBA") if image.mode in ("RGBA", "LA", "P") else image.convert("RGB")
    if frame.size != size:
        frame = frame.resize(size, Image.Resampling.LANCZOS)
    buffer = io.BytesIO()
    if frame.mode == "RGBA" and _min_alpha(frame) < 255:  # transparency: JPEG cannot keep it
        frame.save(buffer, "PNG", optimize=True)
        return buffer.getvalue(), "image/png"
    frame.convert("RGB").save(buffer, "JPEG", quality=quality)
    return buffer.getvalue(), "image/jpeg"


def data_url(data: bytes, mime_type: str) -> str:
    return f"data:{mime_type};base64,{base64.b64encode(data).decode()}"


# Images fitted lately, newest last: a conversation's last turns are sent again with every request, and
# fitting (decoding, scaling, encoding) is most of an image turn's cost. Bounded by bytes, not count.
_FITTED: dict[tuple[str, ImageLimits], tuple[bytes, str]] = {}
FITTED_BYTES = 32 * 2**20


def fitted(
    sha256: str, data: bytes, mime_type: str, limits: ImageLimits, *, provider: str, model: str
) -> tuple[bytes, str]:
    """`fit`, remembered by the image's hash and the limits."""
    key = (sha256, limits)
    if (done := _FITTED.pop(key, None)) is None:
        done = fit(data, mime_type, limits, provider=provider, model=model)
    _FITTED[key] = done  # (re)inserted last: the most recently used
    held = sum(len(d) for d, _ in _FITTED.values())
    while held > FITTED_BYTES and len(_FITTED) > 1:
        oldest = next(iter(_FITTED))
        held -= len(_FITTED.pop(oldest)[0])
    return done


# what OpenAI's `input_audio` parts take (its audio guide: wav and mp3), by MIME type
AUDIO_FORMATS = {
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/wave": "wav",
    "audio/mpeg": "mp3",
    "audio/mp3": "mp3",
}


class ShownImages:
    """Which images of one request go as images: those whose bytes the request holds, each once
    (a second reference to the same image is said in text)."""

    def __init__(self, media: Mapping[str, bytes], limits: ImageLimits, *, provider: str, model: str):
        self._media, self._limits, self._provider, self._model = media, limits, provider, model
        self._sent: set[str] = set()

    def image(self, part: MediaPart) -> tuple[bytes, str] | None:
        """The image to send for this part (fitted to the limits), or None: it goes as text."""
        data = self._media.get(part.sha256) if part.media == "image" else None
        if data is None or part.sha256 in self._sent:
            return None
        self._sent.add(part.sha256)
        return fitted(
            part.sha256, data, part.mime_type, self._limits, provider=self._provider, model=self._model
        )

    def audio(self, part: MediaPart) -> tuple[bytes, str] | None:
        """The audio to send for this part as (bytes, format: wav | mp3, what `input_audio` takes), or
        None: the model takes no audio (its bytes are not in the request) or not in this format."""
        fmt = AUDIO_FORMATS.get(part.mime_type) if part.media == "audio" else None
        data = self._media.get(part.sha256)
        if data is None or fmt is None or part.sha256 in self._sent:
            return None
        self._sent.add(part.sha256)
        return data, fmt

    def text(self, part: MediaPart) -> str:
        """What stands for a part not sent as an image."""
        if part.sha256 in self._sent:
            return f"[the same {part.media} as above{f' ({part.filename})' if part.filename else ''}]"
        return part.stand_in()


# What one image shown to a model counts in a prompt's estimate (agentd.engine.overflow), from the
# providers' documented costs, the larger of the two so the estimate errs toward compacting early:
# OpenAI high detail fits the image in 2048x2048, scales its shortest side to 768 and counts 170 tokens a
# 512-px tile plus 85 (a 1024x1024 image: 4 tiles, 765); Anthropic fits the long side to 1568 px and
# counts width*height/750 (about 1600 at most). An image Pillow cannot read counts as a 1024x1024 one.
UNREAD_IMAGE_TOKENS = 765
_TOKENS: dict[str, int] = {}  # by sha256: an image's header is read once, however often it is shown


def image_tokens(sha256: str, data: bytes) -> int:
    if (known := _TOKENS.get(sha256)) is not None:
        return known
    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
    except (OSError, ValueError):
        return UNREAD_IMAGE_TOKENS
    if len(_TOKENS) > 10_000:
        _TOKENS.clear()
    _TOKENS[sha256] = tokens = max(_openai_tokens(width, height), _anthropic_tokens(width, height))
    return tokens


def _openai_tokens(width: int, height: int) -> int:
    scale = min(1.0, 2048 / max(width, height))
    w, h = width * scale, height * scale
    scale = min(1.0, 768 / min(w, h))
    tiles = math.ceil(w * scale / 512) * math.ceil(h * scale / 512)
    return 85 + 170 * tiles


def _anthropic_tokens(width: int, height: int) -> int:
    scale = min(1.0, 1568 / max(width, height))
    return min(1600, math.ceil(width * scale * height * scale / 750))


def _min_alpha(frame: Image.Image) -> int:
    low, _high = frame.getchannel("A").getextrema()
    return int(low)  # type: ignore[arg-type]  # (one band: two numbers)
