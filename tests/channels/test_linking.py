"""Linking a Slack and a Telegram account through the platforms themselves: `/link` in a Slack direct
message (Socket Mode, slack_bolt against the fake Slack) answers a code in that chat; `/link <code>`
sent from Telegram (long polling, python-telegram-bot against the fake Bot API) joins the two. A wrong,
an expired and a reused code are refused in the chat they came from, and the link is what is stored."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from agentd.daemon import Daemon
from agentd.store.link_queries import PersonOf
from agentd.store.queries import AuditEvents
from testkit.clock import ManualClock
from testkit.fake_slack import FakeSlack
from testkit.fake_telegram import FakeTelegram
from testkit.waiting import wait_until

pytestmark = pytest.mark.filterwarnings(
    "ignore:Deprecated since version v22.2. In a future major version attribute .retry_after."
    ":telegram.warnings.PTBDeprecationWarning"
)

ANA_SLACK, ANA_DM = "U012AB", "D0ANA"  # her Slack user and her direct-message channel with the bot
ANA_TG, BOB_TG = 42, 4343  # Telegram user ids (a private chat's id is its user's)
CODE = re.compile(r"Your link code is ([A-Z0-9]{8})\.")


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[tuple[Daemon, FakeSlack, FakeTelegram]]:
    async with FakeSlack() as slack, FakeTelegram() as telegram:
        q = json.dumps
        (tmp_path / "agents").mkdir()
        (tmp_path / "agents" / "concierge.yaml").write_text(
            f"""\
memory: {{scope: thread, persistent: true, persistent_scope: user}}
channels:
  slack: {{bot_token: {q(slack.bot_token)}, app_token: {q(slack.app_token)}, api_base_url: {q(slack.api_url)}}}
  telegram:
    token: {q(telegram.token)}
    mode: polling
    poll_timeout: 5
    api_base_url: {q(telegram.api_base_url)}
"""
        )
        daemon = Daemon(tmp_path / "agents", tmp_path / "data", reload_interval=60)
        await daemon.start()
        try:
            await wait_until(lambda: running(daemon), "slack and telegram to run", 20)
            yield daemon, slack, telegram
        finally:
            await daemon.shutdown()


def running(daemon: Daemon) -> bool:
    [agent] = daemon.describe_agents()
    return {c["name"]: c["status"] for c in agent["channels"]} == {"slack": "running", "telegram": "running"}


async def answer(visible: Callable[[], list[str]], send: Callable[[], object]) -> str:
    """What the bot says next in one chat after `send`."""
    before = len(visible())
    send()
    await wait_until(lambda: len(visible()) > before, "the reply in the chat")
    return visible()[-1]


async def on_slack(slack: FakeSlack, text: str) -> str:
    before = len(slack.visible(ANA_DM))
    # in a direct message (channel_type im); a leading mention, as the Slack client sends a message that
    # starts with "/" only that way (else it is taken for one of Slack's own slash commands)
    await slack.push_event(
        slack.message_event(
            f"<@{slack.bot_user_id}> {text}", channel=ANA_DM, user=ANA_SLACK, channel_type="im"
        )
    )
    await wait_until(lambda: len(slack.visible(ANA_DM)) > before, "the reply in the Slack DM")
    return slack.visible(ANA_DM)[-1]


async def on_telegram(telegram: FakeTelegram, text: str, user: int = ANA_TG) -> str:
    return await answer(lambda: telegram.visible(user), lambda: telegram.send_text(text, user_id=user))


async def code_from_slack(slack: FakeSlack) -> str:
    said = await on_slack(slack, "/link")
    match = CODE.search(said)
    assert match, said
    return match.group(1)


async def test_a_code_given_on_slack_links_the_telegram_account_it_is_sent_from(
    daemon: tuple[Daemon, FakeSlack, FakeTelegram],
) -> None:
    d, slack, telegram = daemon
    assert d.daemon_store is not None
    refused = await on_telegram(telegram, "/link QQQQ2345")
    assert "not one I gave" in refused

    clock = ManualClock(d.people.clock.time())
    d.people.clock = clock
    stale = await code_from_slack(slack)
    clock.advance(601)  # the code was good for 10 minutes
    assert "expired" in await on_telegram(telegram, f"/link {stale}")

    code = await code_from_slack(slack)
    linked = await on_telegram(telegram, f"/link {code}")
    assert linked.startswith(f"Linked: you are one person with slack:{ANA_SLACK}.")
    assert "used already" in await on_telegram(telegram, f"/link {code}", user=BOB_TG)  # once only

    stored = await d.daemon_store.read(PersonOf(f"telegram:{ANA_TG}"))
    assert stored is not None and stored.accounts == (f"slack:{ANA_SLACK}", f"telegram:{ANA_TG}")
    assert await d.daemon_store.read(PersonOf(f"telegram:{BOB_TG}")) is None
    whoami = await on_slack(slack, "/whoami")
    assert (
        whoami
        == f"You are {stored.person}: slack:{ANA_SLACK}, telegram:{ANA_TG} (this one is slack:{ANA_SLACK})."
    )

    trail = [(e["action"], e["data"]) for e in await d.daemon_store.read(AuditEvents(kind="person"))]
    assert [action for action, _ in trail] == [
        "link_refused",
        "link_code",
        "link_refused",
        "link_code",
        "link",
        "link_refused",
    ]
    assert [data.get("reason") for action, data in trail if action == "link_refused"] == [
        "unknown",
        "expired",
        "unknown",
    ]
    assert all(code not in json.dumps(data) and stale not in json.dumps(data) for _, data in trail)
