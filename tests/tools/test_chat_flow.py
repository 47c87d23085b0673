"""One approval flow through a chat channel end to end: the daemon in this loop, python-telegram-bot
against the fake Bot API, a fake OpenAI model calling a real MCP server over stdio.

Alice asks in her chat; the call needs Bob's approval; Alice's next message waits; Bob approves from
his own chat; the resumed run's answer is posted into Alice's chat, then her waiting message is answered.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentd.daemon import Daemon
from testkit.fake_llm import FakeLLM
from testkit.fake_telegram import FakeTelegram
from testkit.waiting import wait_until
from tests.tools.support import stdio_server, tool_events

ALICE, BOB = 1111, 2222
pytestmark = pytest.mark.filterwarnings(
    "ignore:Deprecated since version v22.2. In a future major version attribute .retry_after."
    ":telegram.warnings.PTBDeprecationWarning"
)


@pytest.fixture
async def telegram() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server


def texts_to(telegram: FakeTelegram, chat: int) -> list[str]:
    return [m["text"] for m in telegram.sent if m["chat_id"] == chat]


async def test_an_approval_from_another_chat_resumes_the_run_and_posts_its_answer(
    tmp_path: Path, telegram: FakeTelegram
) -> None:
    files = tmp_path / "files"
    files.mkdir()
    agents = tmp_path / "agents"
    agents.mkdir()
    with FakeLLM() as fake:
        settings = {
            "providers": {"fake": {"kind": "openai", "base_url": fake.openai_base_url, "api_key": "k"}}
        }
        (tmp_path / "agentd.yaml").write_text(json.dumps(settings))
        agent = {
            "purpose": "You keep notes.",
            "model": "fake/gpt-test",
            "memory": {"scope": "thread"},
            "channels": {
                "telegram": {
                    "token": telegram.token,
                    "api_base_url": telegram.api_base_url,
                    "poll_timeout": 1,
                }
            },
            "tools": {
                "mcp": {"files": stdio_server(files)},
                "ask": ["files.write_file"],
                "approvers": [f"telegram:{BOB}"],
            },
        }
        (agents / "notes.yaml").write_text(json.dumps(agent))
        daemon = Daemon(agents, tmp_path / "data", reload_interval=60)
        await daemon.start()
        try:
            running = daemon.agent("notes")
            assert running is not None
            await running.state.tool_servers.wait_ready(20)
            await wait_until(
                lambda: daemon.fleet.entries["notes"].channel_states()[0]["status"] == "running",
                "the Telegram channel to start",
            )
            fake.reply(tool_calls=[("files__write_file", {"path": "todo.txt", "content": "call mum"})])
            fake.reply("Noted: call mum.")
            telegram.send_text("note: call mum", user_id=ALICE)
            await telegram.wait_for_sent(1)
            [asked] = texts_to(telegram, ALICE)
            match = re.match(r"Approval needed \[([0-9a-f]{6})\]: files__write_file ", asked)
            assert match, asked
            approval = match.group(1)
            assert f"approvers: telegram:{BOB}" in asked

            fake.reply("Nothing else for now.")
            telegram.send_text("anything else?", user_id=ALICE)
            await wait_until(
                lambda: running.state.locks.waiting(f"telegram:{ALICE}") == 1, "Alice's message to wait"
            )
            telegram.send_text(f"/approve {approval}", user_id=ALICE)  # Alice is not an approver
            await wait_until(lambda: len(texts_to(telegram, ALICE)) == 2, "Alice's refusal")
            assert (
                texts_to(telegram, ALICE)[1]
                == f"You cannot answer approval [{approval}]: only telegram:{BOB} can."
            )

            telegram.send_text(f"/approve {approval}", user_id=BOB)
            await wait_until(lambda: len(texts_to(telegram, ALICE)) == 4, "the answers in Alice's chat", 10)
            assert texts_to(telegram, ALICE)[2:] == ["Noted: call mum.", "Nothing else for now."]
            assert texts_to(telegram, BOB) == [
                f"Approved [{approval}] (files__write_file in telegram:{ALICE})."
            ]
            assert (files / "todo.txt").read_text() == "call mum"
            events = await tool_events(running)
            assert [(a, d.get("by")) for a, d in events] == [
                ("approval_requested", None),
                ("approved", f"telegram:{BOB}"),
                ("called", None),
            ]
        finally:
            await daemon.shutdown()
