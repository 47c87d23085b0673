"""Splitting a long reply into messages a platform accepts, without breaking a code block."""

from __future__ import annotations

FENCE = "```"


def split_message(text: str, limit: int) -> list[str]:
    """Split text into chunks of at most `limit` characters.

    Prefers to break at a blank line, then a newline, then a space. A chunk
    that ends inside a ``` code block is closed with ``` and the next chunk
    reopens it (with the same language tag), so every chunk renders on its own.
    """
    if limit < 16:
        raise ValueError("limit too small to split code blocks safely")
    if not text:
        return [""]
    chunks: list[str] = []
    rest = text
    reopen = ""  # the fence line to put in front of the next chunk, e.g. "```python\n"
    while rest:
        room = limit - len(reopen)
        if len(rest) <= room and _fence_state(reopen + rest)[0] is False:
            chunks.append(reopen + rest)
            break
        # leave room for a closing "\n```" in case the cut lands inside a code block
        cut = _cut_point(rest, room - len(FENCE) - 1) if len(rest) > room else len(rest)
        piece, rest = rest[:cut], rest[cut:]
        chunk = reopen + piece
        inside, lang = _fence_state(chunk)
        if inside:
            chunk = chunk.rstrip("\n") + "\n" + FENCE
            reopen = f"{FENCE}{lang}\n"
        else:
            reopen = ""
        chunks.append(chunk)
        rest = rest.lstrip("\n") if not inside else rest
    return chunks


def _cut_point(text: str, room: int) -> int:
    window = text[:room]
    for sep in ("\n\n", "\n", " "):
        at = window.rfind(sep)
        if at > room // 2:
            return at + len(sep)
    return room


def _fence_state(text: str) -> tuple[bool, str]:
    """Whether text ends inside a ``` block, and that block's language tag."""
    inside, lang = False, ""
    for line in text.split("\n"):
        stripped = line.strip()
        if stripped.startswith(FENCE):
            if inside:
                inside, lang = False, ""
            else:
                inside, lang = True, stripped[len(FENCE) :].strip()
    return inside, lang
