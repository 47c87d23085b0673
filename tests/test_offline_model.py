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
