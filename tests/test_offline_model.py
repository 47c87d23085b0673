"""The offline model counts what was said, not a tool call's steps (issue 17, item 24): after a
`remember` turn (the person's message, the tool call, its result, the reply) it sees 2 messages."""

from __future__ import annotations

from pathlib import Path

from tests.support import serving


async def test_a_tool_calls_steps_are_not_earlier_messages(tmp_path: Path) -> None:
    agents = {"assistant": "purpose: x\nmemory: {scope: thread, persistent: true}\nchannels: {webhook: {}}\n"}
    async with serving(tmp_path, agents) as (_, client):

        async def say(text: str) -> str:
            r = await client.post("/agents/assistant/messages", json={"conversation_id": "c", "text": text})
            assert r.status_code == 200, r.text
            return str(r.json()["reply"])

        assert await say("remember city: Lisbon") == "Remembered city."
        assert (await say("hello")).startswith(
            "(offline model) I see 2 earlier messages in this conversation."
        )
        assert (await say("hello again")).startswith("(offline model) I see 4 earlier messages")


def test_the_count_of_what_was_said_is_read_once_and_never_stale() -> None:
    """The offline model counts a growing history from where it stopped (the same Message objects come
    back each turn), and starts again when the history is not the one it counted (a compaction, /new)."""
    from agentd.messages import Message, ToolCallPart, ToolResultPart
    from agentd.providers.offline import _said, _SaidCounter

    counter = _SaidCounter()
    call = Message(role="assistant", parts=(ToolCallPart(id="c1", name="remember", arguments={}),))
    result = Message(role="tool", parts=(ToolResultPart(call_id="c1", name="remember", content="ok"),))
    history = [Message.user("hi", "u"), call, result, Message.assistant("done")]
    assert counter.count(history, len(history)) == 2
    history += [Message.user("more", "u"), Message.assistant("sure")]
    assert counter.count(history, len(history)) == 4
    changed = [history[0], Message.assistant("another"), *history[2:]]  # same first, another past
    changed[-1] = Message.assistant("not the one counted")
    assert counter.count(changed, len(changed)) == sum(map(_said, changed)) == 5
    compacted = [Message.assistant("summary"), *history[4:]]
    assert counter.count(compacted, len(compacted)) == 3
