"""Summarising text longer than the summariser can take: in pieces that fit, then their summaries.

A compaction is needed exactly when the conversation has grown long, so the text to summarise can be
longer than the summary model's own window; sent whole it would overflow too, and the conversation
would stay stuck. So the text is cut (at line ends where possible) into pieces that fit, each piece
is summarised, and the joined summaries are summarised again, until one call takes all of it (a
summary of summaries). The number of rounds is bounded: summaries that do not shrink fail, they do
not loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from agentd.messages import CHARS_PER_TOKEN

MAX_ROUNDS = 4
# what a summary may write back, kept free in the window (and the instructions' share)
RESERVE_TOKENS = 1024
MIN_PIECE_CHARS = 200
PART_LINE_CHARS = 48  # room for the "(Part i of n ...)" line above each piece

Summarise = Callable[[str], Awaitable[str]]


class DoesNotFit(Exception):
    """The text could not be brought under the window in MAX_ROUNDS rounds."""


def budget_chars(window: int | None, instructions: str) -> int | None:
    """How many characters of text one summary call may carry in `window` tokens (None: no limit)."""
    if window is None:
        return None
    free = window - min(RESERVE_TOKENS, window // 4)
    return max(MIN_PIECE_CHARS, free * CHARS_PER_TOKEN - len(instructions) - 64)


def cut(text: str, size: int) -> list[str]:
    """`text` in pieces of at most `size` characters, cut at the last line end inside each where there is one."""
    pieces = []
    while len(text) > size:
        at = text.rfind("\n", size // 2, size)
        at = size if at <= 0 else at + 1
        pieces.append(text[:at])
        text = text[at:]
    if text:
        pieces.append(text)
    return pieces


def pieces_of(text: str, budget: int) -> list[str]:
    """The pieces `text` is summarised in when it is longer than `budget` (each with its part line fits)."""
    return cut(text, max(MIN_PIECE_CHARS, budget - PART_LINE_CHARS))


async def summarise_fitting(text: str, budget: int | None, summarise: Summarise) -> tuple[str, int]:
    """The summary of `text` with no call carrying more than `budget` characters; and how many
    calls that took. One call when it fits."""
    calls = 0
    for _ in range(MAX_ROUNDS):
        if budget is None or len(text) <= budget:
            return await summarise(text), calls + 1
        pieces = pieces_of(text, budget)
        summaries = []
        for i, piece in enumerate(pieces, 1):
            summaries.append(await summarise(f"(Part {i} of {len(pieces)} of a longer excerpt.)\n{piece}"))
            calls += 1
        joined = "\n\n".join(s.strip() for s in summaries)
        if len(joined) >= len(text):
            raise DoesNotFit("the summaries of the pieces were no shorter than the pieces")
        text = joined
    raise DoesNotFit(f"the text did not fit the summary model's window in {MAX_ROUNDS} rounds")
