"""Real files for media tests and benchmarks: images made with Pillow, a PDF with text on its pages
(written by hand, as a PDF writer would), a few bytes of audio."""

from __future__ import annotations

import io
import os

from PIL import Image


def png(color: tuple[int, int, int] = (200, 30, 30), size: tuple[int, int] = (64, 48)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, "PNG")
    return buffer.getvalue()


def noisy_jpeg(size: tuple[int, int] = (800, 600), quality: int = 95) -> bytes:
    """A photo-like JPEG that compresses badly (random pixels): its bytes are unlike any other file's."""
    image = Image.frombytes("RGB", size, os.urandom(size[0] * size[1] * 3))
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=quality)
    return buffer.getvalue()


def jpeg_of_bytes(target: int) -> bytes:
    """A JPEG of about `target` bytes (random pixels, so it does not compress)."""
    side = 64
    while True:
        data = noisy_jpeg((side, side))
        if len(data) >= target:
            return data
        side = int(side * max(1.1, (target / len(data)) ** 0.5))


def pdf(*pages: str) -> bytes:
    """A PDF with one line of text on each page (Helvetica), its cross-reference table exact."""
    objects = ["<< /Type /Catalog /Pages 2 0 R >>"]
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(len(pages)))
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>")
    font = 3 + 2 * len(pages)
    for i, text in enumerate(pages):
        escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        stream = f"BT /F1 12 Tf 72 720 Td ({escaped}) Tj ET"
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * i} 0 R"
            f" /Resources << /Font << /F1 {font} 0 R >> >> >>"
        )
        objects.append(f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream")
    objects.append("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for n, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{n} 0 obj\n{body}\nendobj\n".encode()
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += "".join(f"{o:010d} 00000 n \n" for o in offsets).encode()
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def ogg_voice(size: int = 2048) -> bytes:
    """Bytes that stand for a voice note (an Ogg page header, then noise): the fake transcribes by name."""
    return b"OggS\x00\x02" + os.urandom(size - 6)


def wav_tone(seconds: float = 0.2, rate: int = 8000) -> bytes:
    """A short WAV file (a 440 Hz tone), as a client's recorded audio."""
    import math
    import struct
    import wave

    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        frames = (int(8000 * math.sin(2 * math.pi * 440 * n / rate)) for n in range(int(seconds * rate)))
        out.writeframes(b"".join(struct.pack("<h", f) for f in frames))
    return buffer.getvalue()
