"""Stored message bodies: one at a time and a page at once decode to the same messages."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agentd.messages import Message, ToolCallPart, ToolResultPart, dump_message, load_message, load_messages
from agentd.store.records import StoredMessage, stored_messages

MESSAGES = [
    Message.user("hello <b>&</b> \u00e9\U0001f600", user_id="telegram:42", sent_at=1700000000.5),
    Message(role="assistant", parts=(ToolCallPart(id="c1", name="files__read", arguments={"path": "a,b]"}),)),
    Message(
        role="tool",
        parts=(ToolResultPart(call_id="c1", name="files__read", content="[1, 2]", is_error=True),),
    ),
    Message.assistant('quotes " and \\ and a newline\n'),
]


def test_a_page_decodes_as_its_rows_do_one_by_one() -> None:
    bodies = [dump_message(m) for m in MESSAGES]
    assert load_messages(bodies) == [load_message(b) for b in bodies] == MESSAGES
    assert load_messages([]) == []


def test_rows_become_stored_messages_in_order_with_their_seq_and_run() -> None:
    rows = [(i + 7, dump_message(m), f"r{i}" if i % 2 else None) for i, m in enumerate(MESSAGES)]
    assert stored_messages(rows) == [
        StoredMessage(i + 7, m, f"r{i}" if i % 2 else None) for i, m in enumerate(MESSAGES)
    ]


def test_a_broken_body_in_a_page_is_an_error_not_a_shorter_page() -> None:
    bodies = [dump_message(MESSAGES[0]), '{"role": "user"', dump_message(MESSAGES[1])]
    with pytest.raises(ValidationError):
        load_messages(bodies)
