"""/ui/'s thumbnails of the images people sent, beside their message in the transcript: a small JPEG
(or PNG, for transparency) made with Pillow from the stored file, never the file itself."""

from __future__ import annotations

import io

from PIL import Image

THUMB_SIDE = 240


def thumbnail(data: bytes) -> tuple[bytes, str] | None:
    """The image scaled to THUMB_SIDE, or None when it is not an image Pillow reads."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.thumbnail((THUMB_SIDE, THUMB_SIDE))
            frame = image.convert("RGBA" if image.mode in ("RGBA", "LA", "P") else "RGB")
    except (OSError, ValueError):
        return None
    out = io.BytesIO()
    if frame.mode == "RGBA":
        frame.save(out, "PNG")
        return out.getvalue(), "image/png"
    frame.save(out, "JPEG", quality=80)
    return out.getvalue(), "image/jpeg"
