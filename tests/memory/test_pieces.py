"""memory.pieces: text longer than the summariser's window is summarised in pieces that fit."""

from __future__ import annotations

import pytest

from agentd.memory.pieces import DoesNotFit, budget_chars, cut, summarise_fitting


def test_cut_keeps_every_character_and_cuts_at_line_ends() -> None:
    text = "".join(f"line {i} " + "x" * 40 + "\n" for i in range(20))
    pieces = cut(text, 200)
    assert "".join(pieces) == text and all(len(p) <= 200 for p in pieces)
    assert all(p.endswith("\n") for p in pieces)
    assert cut("y" * 450, 200) == ["y" * 200, "y" * 200, "y" * 50]  # no line end: cut at the size


def test_the_budget_leaves_room_for_the_instructions_and_the_answer() -> None:
    assert budget_chars(None, "say") is None
    assert budget_chars(4000, "i" * 100) == (4000 - 1000) * 4 - 100 - 64
    assert budget_chars(10, "i" * 100) == 200  # never less than a usable piece


async def test_no_call_carries_more_than_the_budget_and_summaries_are_summarised() -> None:
    sent: list[str] = []

    async def summarise(text: str) -> str:
        sent.append(text)
        return f"s{len(sent)}"

    summary, calls = await summarise_fitting("z" * 1000 + "\n" + "w" * 1000, 500, summarise)
    assert all(len(t) <= 500 for t in sent)  # a piece with its "(Part i of n)" line
    assert calls == len(sent) and summary == f"s{calls}"  # the pieces, then their summaries at once
    assert sent[-1] == "\n\n".join(f"s{i}" for i in range(1, calls))


async def test_summaries_that_do_not_shrink_fail_instead_of_looping() -> None:
    async def verbose(text: str) -> str:
        return text + text

    with pytest.raises(DoesNotFit):
        await summarise_fitting("q" * 2000, 300, verbose)
