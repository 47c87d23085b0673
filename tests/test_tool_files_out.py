"""Files from tools reach people (issue 21/22): an MCP server's image (testkit/fake_mcp_media.py, over
stdio) goes with the reply as an upload on Telegram (its fake, python-telegram-bot on the wire), and
over HTTP the webhook's reply and the conversation view list it with a URL the token reads it at;
`media.send_tool_files: false` keeps them in."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from agentd.channels.telegram import TelegramChannel
from agentd.config.models import DaemonSpec
from agentd.config.telegram import TelegramSpec
from agentd.daemon import Daemon
from agentd.daemon.host import AgentHost
from agentd.engine.agent import Agent
from agentd.events import InboundEvent
from testkit.fake_llm import FakeLLM
from testkit.fake_mcp_media import media_command, picture_bytes
from testkit.fake_telegram import FakeTelegram
from testkit.waiting import wait_until
from tests.support import Harness, daemon_on_loopback

pytestmark = pytest.mark.filterwarnings(
    "ignore:Deprecated since version v22.2. In a future major version attribute .retry_after."
    ":telegram.warnings.PTBDeprecationWarning"
)
TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
RED = picture_bytes()
RED_SHA = hashlib.sha256(RED).hexdigest()
TOOLS = json.dumps({"mcp": {"media": {"command": media_command()}}})
ALICE = 1111


def agent_text(media: str = "{}") -> str:
    return f"model: gpt/gpt-4o\nmemory: {{scope: thread}}\nchannels: {{webhook: {{}}}}\ntools: {TOOLS}\nmedia: {media}\n"


@pytest.fixture
async def served(tmp_path: Path, fake: FakeLLM) -> AsyncIterator[tuple[Daemon, str]]:
    settings = (
        f"providers: {{gpt: {{kind: openai, base_url: '{fake.openai_base_url}', api_key: k, max_retries: 0}}}}\n"
        f"http: {{token: {TOKEN}}}\n"
    )
    agents = {"bot": agent_text(), "quiet": agent_text("{send_tool_files: false}"), "other": agent_text()}
    async with daemon_on_loopback(tmp_path, agents, settings) as (daemon, url):
        for name in agents:
            agent = daemon.agent(name)
            assert agent is not None
            await agent.state.tool_servers.wait_ready(20)
        yield daemon, url


async def test_a_tool_image_is_listed_in_the_webhook_reply_and_read_with_the_token(
    served: tuple[Daemon, str], fake: FakeLLM
) -> None:
    _, url = served
    fake.reply(tool_calls=[("media__picture", {})])
    fake.reply("Here is a red square.")
    async with httpx.AsyncClient(base_url=url, headers=AUTH, trust_env=False) as http:
        r = await http.post(
            "/agents/bot/messages", json={"conversation_id": "c1", "text": "draw", "user_id": "ana"}
        )
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["reply"] == "Here is a red square."
        [file] = body["files"]
        assert file == {
            "sha256": RED_SHA,
            "mime_type": "image/png",
            "filename": "image-1.png",
            "size": len(RED),
            "url": f"/agents/bot/media/{RED_SHA}",
        }
        got = await http.get(file["url"])
        assert got.status_code == 200 and got.content == RED
        assert got.headers["content-type"] == "image/png"
        assert (await http.get(file["url"], headers={"Authorization": "Bearer wrong"})).status_code == 401
        assert (await http.get(f"/agents/other/media/{RED_SHA}")).status_code == 404  # not that agent's
        assert (await http.get(f"/agents/bot/media/{'0' * 64}")).status_code == 404
        bad = await http.get("/agents/bot/media/not-a-hash")
        assert bad.status_code == 404 and "SHA-256" in bad.text

        view = (await http.get("/agents/bot/conversations/webhook:c1")).json()
        assert [(f["sha256"], f["url"]) for f in view["files"]] == [(RED_SHA, file["url"])]

        erased = await http.delete("/people/ana")
        assert erased.status_code == 200, erased.text
        assert (await http.get(file["url"])).status_code == 404  # erased with the person it served


async def test_media_send_tool_files_false_keeps_the_files_in(
    served: tuple[Daemon, str], fake: FakeLLM
) -> None:
    _, url = served
    fake.reply(tool_calls=[("media__picture", {})])
    fake.reply("Drawn.")
    async with httpx.AsyncClient(base_url=url, headers=AUTH, trust_env=False) as http:
        r = await http.post("/agents/quiet/messages", json={"conversation_id": "c1", "text": "draw"})
    assert r.json()["files"] == [] and r.json()["reply"] == "Drawn."
    assert "image_url" in json.dumps(fake.requests[-1].json)  # the model still saw it


@contextlib.asynccontextmanager
async def serving(channel: TelegramChannel, a: Agent) -> AsyncIterator[AgentHost]:
    host = AgentHost(SimpleNamespace(name=a.name, agent=a), asyncio.ensure_future)
    task = asyncio.create_task(channel.run(host))
    try:
        await wait_until(lambda: host.statuses.get(channel.name, ("",))[0] == "running" or task.done())
        assert not task.done(), task
        yield host
    finally:
        await channel.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 5.0)


async def test_a_tool_image_reaches_the_person_as_a_telegram_photo(harness: Harness, fake: FakeLLM) -> None:
    providers = {
        "gpt": {"kind": "openai", "base_url": fake.openai_base_url, "api_key": "k", "max_retries": 0}
    }
    a = await harness.agent(agent_text(), settings=DaemonSpec.model_validate({"providers": providers}))
    await a.state.tool_servers.wait_ready(20)
    fake.reply(tool_calls=[("media__picture", {"side": 32})])
    fake.reply("Your picture.")
    async with FakeTelegram() as telegram:
        channel = TelegramChannel(
            "bot", TelegramSpec(token=telegram.token, api_base_url=telegram.api_base_url)
        )
        async with serving(channel, a):
            telegram.send_text("draw me a square", user_id=ALICE)
            await wait_until(lambda: len(telegram.uploads) == 1, "the upload", timeout=15)
        [sent] = telegram.sent
        [photo] = telegram.uploads
    assert sent["text"] == "Your picture."
    assert (photo.method, photo.chat_id, photo.data) == ("sendPhoto", ALICE, picture_bytes(32))


async def test_a_reply_without_tool_files_carries_none(harness: Harness, fake: FakeLLM) -> None:
    providers = {
        "gpt": {"kind": "openai", "base_url": fake.openai_base_url, "api_key": "k", "max_retries": 0}
    }
    a = await harness.agent(agent_text(), settings=DaemonSpec.model_validate({"providers": providers}))
    reply = await a.handle(InboundEvent(a.name, "webhook:x", "hi", "webhook", user_id="ana"))
    assert reply.files == () and reply.text.startswith("fake reply to:")
