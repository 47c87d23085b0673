"""Every channel at once in one daemon: Discord, Slack, Telegram and the HTTP webhook.

The fakes (real wire protocols on 127.0.0.1) live in the test's event loop; the
daemon runs either as `agentd run` in its own process or in-process. One agent
has the webhook and the three chat channels on their outbound connections
(gateway, Socket Mode, long polling); a second agent takes Slack and Telegram
through the daemon's own HTTP server (signed Events API, Telegram webhook).
The same script drives both ways of running: one message through every
channel at the same time, a command from a channel, memory shared across
channels, the audit trail, and a clean stop that closes every platform connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import discord
import httpx
import pytest

from agentd.daemon import Daemon
from testkit.fake_discord import FakeDiscord
from testkit.fake_slack import FakeSlack
from testkit.fake_telegram import FakeTelegram
from testkit.waiting import wait_until

# PTB 22 warns whenever it builds a RetryAfter unless PTB_TIMEDELTA is set (in-process variant).
pytestmark = pytest.mark.filterwarnings(
    "ignore:Deprecated since version v22.2. In a future major version attribute .retry_after."
    ":telegram.warnings.PTBDeprecationWarning"
)

AGENT = "concierge"  # webhook + discord + slack (Socket Mode) + telegram (polling)
RELAY = "relay"  # slack (Events API) + telegram (webhook), both on the daemon's HTTP server
TELEGRAM_SECRET = "relay-s3cret"
ALICE = 1111  # Telegram user (and so private chat) id
GENERAL = "C0GENERAL"  # FakeSlack's default channel
SLACK_UNSIGNED = "not signed: X-Slack-Request-Timestamp and X-Slack-Signature are required"
SLACK_NOT_AN_OBJECT = "event_callback whose `event` is not an object"
ALL_RUNNING = {
    AGENT: dict.fromkeys(["webhook", "discord", "slack", "telegram"], "running"),
    RELAY: dict.fromkeys(["slack", "telegram"], "running"),
}


def offline(text: str, earlier: int = 0, keys: str = "I hold no memory keys yet.") -> str:
    """What the built-in offline model answers to a plain message."""
    plural = "" if earlier == 1 else "s"
    return f"(offline model) I see {earlier} earlier message{plural} in this conversation. {keys} You said: {text}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Platforms:
    discord: FakeDiscord
    slack: FakeSlack
    telegram: FakeTelegram
    slack_http: FakeSlack  # the relay's Slack app
    telegram_hook: FakeTelegram  # the relay's Telegram bot
    guild: int
    general: int  # Discord text channel
    alice: int  # Discord user


@pytest.fixture
async def platforms(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Platforms]:
    # The in-process daemon points discord.py's process-wide endpoints at the fake; put them back afterwards.
    monkeypatch.setattr(discord.http.Route, "BASE", discord.http.Route.BASE)
    gateway = discord.gateway.DiscordWebSocket
    monkeypatch.setattr(gateway, "DEFAULT_GATEWAY", gateway.DEFAULT_GATEWAY)
    fake_discord = FakeDiscord(heartbeat_ms=500)
    await fake_discord.start()
    guild = fake_discord.add_guild("home")
    general = fake_discord.add_text_channel(guild, "general")
    alice = fake_discord.add_user("alice")
    try:
        async with (
            FakeSlack() as fake_slack,
            FakeTelegram() as fake_telegram,
            FakeSlack(signing_secret="relay-signing-secret") as slack_http,
            FakeTelegram() as telegram_hook,
        ):
            yield Platforms(
                fake_discord, fake_slack, fake_telegram, slack_http, telegram_hook, guild, general, alice
            )
    finally:
        await fake_discord.stop()


def write_agents(root: Path, p: Platforms, port: int) -> None:
    # JSON strings are YAML strings: tokens and URLs need no further quoting thought.
    q = json.dumps
    (root / "agents").mkdir()
    (root / "agents" / f"{AGENT}.yaml").write_text(
        f"""\
purpose: Answer people wherever they write.
memory:
  scope: thread
  persistent: true
channels:
  webhook: {{}}
  discord:
    token: {q(p.discord.token)}
    api_base_url: {q(p.discord.api_base_url)}
    gateway_url: {q(p.discord.gateway_url)}
  slack:
    bot_token: {q(p.slack.bot_token)}
    app_token: {q(p.slack.app_token)}
    api_base_url: {q(p.slack.api_url)}
  telegram:
    token: {q(p.telegram.token)}
    mode: polling
    poll_timeout: 5
    api_base_url: {q(p.telegram.api_base_url)}
""",
        encoding="utf-8",
    )
    (root / "agents" / f"{RELAY}.yaml").write_text(
        f"""\
purpose: Answer Slack and Telegram over the daemon's own HTTP server.
memory:
  scope: thread
channels:
  slack:
    bot_token: {q(p.slack_http.bot_token)}
    signing_secret: {q(p.slack_http.signing_secret)}
    api_base_url: {q(p.slack_http.api_url)}
  telegram:
    token: {q(p.telegram_hook.token)}
    mode: webhook
    secret_token: {q(TELEGRAM_SECRET)}
    webhook_url: {q(f"http://127.0.0.1:{port}/telegram/{RELAY}")}
    api_base_url: {q(p.telegram_hook.api_base_url)}
""",
        encoding="utf-8",
    )


# -- the two ways to run the daemon -------------------------------------------------------------


class DaemonUnderTest(Protocol):
    url: str
    port: int

    async def start(self) -> None: ...

    async def terminate(self, timeout: float) -> None:
        """Ask for a clean stop and wait (keeping the loop running) until the daemon is gone."""
        ...

    def stopped_cleanly(self) -> str:
        """An empty string when the daemon stopped cleanly, else what went wrong."""
        ...

    def log(self) -> str:
        """What the daemon logged: its output as a process, or its log records in-process."""
        ...

    async def kill(self) -> None:
        """Last resort when the test failed half-way."""
        ...


class Subprocess:
    """`agentd run` as its own process, stopped with SIGTERM as an init system would."""

    def __init__(self, root: Path):
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_file = root / "daemon.log"
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with self.log_file.open("wb") as out:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "agentd.cli",
                "run",
                "--agents",
                "agents",
                "--data",
                "data",
                "--port",
                str(self.port),
                "--reload-interval",
                "0.2",
                cwd=self.root,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                env=env,
            )

    async def terminate(self, timeout: float) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), timeout)
        except TimeoutError:
            raise AssertionError(f"the daemon did not exit {timeout} s after SIGTERM\n{self.log()}") from None

    def stopped_cleanly(self) -> str:
        assert self.proc is not None
        code = self.proc.returncode
        return "" if code == 0 else f"exit code {code}"

    def log(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""

    async def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()


class LogLines(logging.Handler):
    """Keeps every record's message, so an in-process daemon has a log to check like a subprocess."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))  # with the traceback, if the record carries one


class InProcess:
    """The same Daemon in the test's own loop, stopped as its signal handler would stop it."""

    def __init__(self, root: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.daemon = Daemon(root / "agents", root / "data", port=self.port, reload_interval=0.2)
        self.task: asyncio.Task[None] | None = None
        self.records = LogLines()
        self.logger = logging.getLogger("agentd")
        self.level_before = self.logger.level

    async def start(self) -> None:
        # `agentd run` logs at INFO; make the in-process daemon log the same lines to our handler.
        self.logger.setLevel(logging.INFO)
        self.logger.addHandler(self.records)
        self.task = asyncio.create_task(self.daemon.serve(install_signals=False))

    async def terminate(self, timeout: float) -> None:
        assert self.task is not None
        self.daemon.request_stop()
        await asyncio.wait_for(asyncio.shield(self.task), timeout)

    def stopped_cleanly(self) -> str:
        assert self.task is not None
        if self.task.exception() is not None:
            return f"serve() raised {self.task.exception()!r}"
        left = [
            (agent["name"], channel)
            for agent in self.daemon.describe_agents()
            for channel in agent["channels"]
            if channel["name"] != "webhook" and channel["status"] != "stopped"
        ]
        return f"channels not stopped: {left}" if left else ""

    def log(self) -> str:
        return "\n".join(self.records.lines)

    async def kill(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()
            with contextlib.suppress(BaseException):
                await self.task
        self.logger.removeHandler(self.records)
        self.logger.setLevel(self.level_before)


# -- the script ------------------------------------------------------------------------------------


async def channel_statuses(client: httpx.AsyncClient) -> dict[str, dict[str, str]]:
    try:
        response = await client.get("/agents")
    except httpx.TransportError:
        return {}  # not listening yet
    return {a["name"]: {c["name"]: c["status"] for c in a["channels"]} for a in response.json()["agents"]}


async def exercise(daemon: DaemonUnderTest, p: Platforms) -> None:
    async with httpx.AsyncClient(base_url=daemon.url, timeout=10.0) as client:
        # Every channel connects to its platform.
        deadline = time.monotonic() + 20
        statuses: dict[str, dict[str, str]] = {}
        while statuses != ALL_RUNNING:
            assert time.monotonic() < deadline, f"channels did not all start: {statuses}\n{daemon.log()}"
            await asyncio.sleep(0.05)
            statuses = await channel_statuses(client)

        # One message through each channel, all at the same time.
        webhook_post = asyncio.create_task(
            client.post(f"/agents/{AGENT}/messages", json={"conversation_id": "w1", "text": "hello webhook"})
        )
        discord_id = await p.discord.user_message(p.general, p.alice, "hello discord", mention_bot=True)
        slack_event = p.slack.mention_event("hello slack")
        await p.slack.push_event(slack_event)
        p.telegram.send_text("hello telegram", user_id=ALICE)
        relay_slack_event = p.slack_http.mention_event("hello slack over http")
        body, headers = p.slack_http.signed_request(p.slack_http.event_callback(relay_slack_event))
        relay_slack_post = asyncio.create_task(
            client.post(f"/slack/{RELAY}/events", content=body, headers=headers)
        )
        relay_telegram_post = asyncio.create_task(
            p.telegram_hook.deliver_webhook(
                p.telegram_hook.message_update("hello telegram webhook", user_id=ALICE)
            )
        )

        webhook = await webhook_post
        assert webhook.status_code == 200, webhook.text
        assert webhook.json()["reply"] == offline("hello webhook")
        assert webhook.json()["conversation_key"] == "webhook:w1"

        [sent] = await p.discord.wait_for_sent(1)
        assert sent.channel_id == p.general
        assert sent.content == offline("hello discord")
        assert sent.reference is not None and str(sent.reference["message_id"]) == str(discord_id)

        [post] = await p.slack.wait_for_posts(1)
        assert (post["channel"], post.get("thread_ts")) == (GENERAL, slack_event["ts"])
        assert post["text"] == offline("hello slack")

        [message] = await p.telegram.wait_for_sent(1)
        assert int(message["chat_id"]) == ALICE
        assert message["text"] == offline("hello telegram")

        # The relay's platforms reached it through the daemon's HTTP server, and it answered over their APIs.
        assert (await relay_slack_post).status_code == 200
        [relay_post] = await p.slack_http.wait_for_posts(1)
        assert (relay_post["channel"], relay_post.get("thread_ts")) == (GENERAL, relay_slack_event["ts"])
        assert relay_post["text"] == offline("hello slack over http", keys="I have no persistent memory.")
        assert p.telegram_hook.webhook is not None
        assert p.telegram_hook.webhook["url"] == f"{daemon.url}/telegram/{RELAY}"
        assert (await relay_telegram_post).status_code == 200
        [relay_message] = await p.telegram_hook.wait_for_sent(1)
        assert int(relay_message["chat_id"]) == ALICE
        assert relay_message["text"] == offline("hello telegram webhook", keys="I have no persistent memory.")
        # Those routes check the platform's proof: a forged signature or secret gets nowhere.
        forged, forged_headers = p.slack_http.signed_request(
            p.slack_http.event_callback(p.slack_http.mention_event("forged")), secret="not-the-secret"
        )
        assert (
            await client.post(f"/slack/{RELAY}/events", content=forged, headers=forged_headers)
        ).status_code == 401
        wrong_secret = p.telegram_hook.message_update("let me in", user_id=ALICE)
        assert (await p.telegram_hook.deliver_webhook(wrong_secret, secret_token="guess")).status_code == 403
        # Junk gets a 4xx with a reason, never a 500: verify first, then parse.
        junk = await client.post(f"/slack/{RELAY}/events", content=b"\xff not json")
        assert junk.status_code == 401, junk.text
        assert junk.json()["error"] == SLACK_UNSIGNED
        body, headers = p.slack_http.signed_request({"type": "event_callback", "event": "not an object"})
        not_an_event = await client.post(f"/slack/{RELAY}/events", content=body, headers=headers)
        assert not_an_event.status_code == 400, not_an_event.text
        assert not_an_event.json()["error"] == SLACK_NOT_AN_OBJECT
        secret = {"X-Telegram-Bot-Api-Secret-Token": TELEGRAM_SECRET}
        not_json = await client.post(f"/telegram/{RELAY}", content=b"{nope", headers=secret)
        assert not_json.status_code == 400, not_json.text
        assert "not JSON" in not_json.json()["error"]

        # A history command from a channel answers about that channel's conversation.
        last_update = p.telegram.send_text("/status", user_id=ALICE)
        status = (await p.telegram.wait_for_sent(2))[1]
        assert int(status["chat_id"]) == ALICE
        assert f"Agent: {AGENT}" in status["text"]
        assert f"Conversation: telegram:{ALICE} " in status["text"]
        assert "Messages in view: 2" in status["text"]  # "hello telegram" and its answer

        # Persistent memory belongs to the agent, not the channel: told in Slack, recalled in Discord.
        remember = p.slack.mention_event("remember color: blue")
        await p.slack.push_event(remember)
        assert (await p.slack.wait_for_posts(2))[1]["text"] == "Remembered color."
        await p.discord.user_message(p.general, p.alice, "recall color", mention_bot=True)
        assert (await p.discord.wait_for_sent(2))[1].content == "I remember: blue"

        # The audit trail names the conversation each event came from.
        memory = (await client.get("/audit", params={"agent": AGENT, "kind": "memory"})).json()["events"]
        assert [(e["action"], e["conversation_key"], e["data"]) for e in memory] == [
            ("remember", f"slack:{GENERAL}:{remember['ts']}", {"key": "color"})
        ]
        commands = (await client.get("/audit", params={"agent": AGENT, "kind": "command"})).json()["events"]
        assert [(e["action"], e["conversation_key"]) for e in commands] == [("status", f"telegram:{ALICE}")]
        assert commands[0]["data"]["user_id"] == str(ALICE)

    # A clean stop closes every platform connection before the daemon exits.
    polls_before_stop = len(p.telegram.calls_to("getUpdates"))
    await daemon.terminate(timeout=10.0)
    assert not (problem := daemon.stopped_cleanly()), f"{problem}\n{daemon.log()}"
    await p.discord.wait_for(lambda: p.discord.connected() == 0)
    await wait_until(lambda: p.slack.open_sockets == 0, "the Slack socket to close")
    # PTB's last act on stop: one getUpdates without waiting, confirming what was handled.
    polls = p.telegram.calls_to("getUpdates")
    assert len(polls) > polls_before_stop
    assert (int(polls[-1]["timeout"]), int(polls[-1]["offset"])) == (0, last_update["update_id"] + 1)
    log = daemon.log()
    stopped = [
        (AGENT, "discord"),
        (AGENT, "slack"),
        (AGENT, "telegram"),
        (RELAY, "slack"),
        (RELAY, "telegram"),
    ]
    for agent, kind in stopped:
        assert f"agent {agent}: channel {kind} stopped" in log, log
    assert "Traceback" not in log, log
    # Nothing the forged requests carried reached an agent.
    assert len(p.slack_http.posts) == 1 and len(p.telegram_hook.sent) == 1


# -- the tests -------------------------------------------------------------------------------------


@pytest.mark.slow
async def test_agentd_run_serves_every_channel_at_once_and_stops_on_sigterm(
    tmp_path: Path, platforms: Platforms
) -> None:
    daemon = Subprocess(tmp_path)
    write_agents(tmp_path, platforms, daemon.port)
    await daemon.start()
    try:
        await exercise(daemon, platforms)
    finally:
        await daemon.kill()
        print(daemon.log())  # pytest shows it when the test failed


async def test_in_process_daemon_serves_every_channel_at_once(tmp_path: Path, platforms: Platforms) -> None:
    daemon = InProcess(tmp_path)
    write_agents(tmp_path, platforms, daemon.port)
    await daemon.start()
    try:
        await exercise(daemon, platforms)
    finally:
        await daemon.kill()
