"""One person, many accounts: Ana on Slack and on Telegram links the two with a one-time code (a wrong,
an expired and a reused code are refused), her persistent memories follow her from one to the other
(a key both held: the newer value, audited), an unlink leaves each account what it wrote, and erasing
her — by either user id — leaves no byte of either account, on SQLite and on PostgreSQL."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from agentd.daemon import Daemon
from agentd.events import InboundEvent
from agentd.store.queries import AuditEvents
from testkit.clock import ManualClock
from tests.test_person_data import MemoryEcho, daemon_on, holding


async def audited(store: Any, kind: str, action: str) -> list[dict[str, Any]]:
    return [e for e in await store.read(AuditEvents(kind=kind)) if e["action"] == action]


TG, SLACK = "42", "U012AB"  # Ana's Telegram and Slack user ids
CODE = re.compile(r"Your link code is ([A-Z0-9]+)\.")


def write_folder(root: Path, store_url: str | None, settings: str = "") -> None:
    agents = root / "agents"
    agents.mkdir(parents=True, exist_ok=True)
    (agents / "full.yaml").write_text(
        "model: mem/m\nmemory: {scope: thread, persistent: true, persistent_scope: user}\n"
        "channels: {webhook: {}}\n"
    )
    store = f"store: {{url: '{store_url}'}}\n" if store_url else ""
    (root / "agentd.yaml").write_text(store + settings)


def on_telegram(text: str, user: str = TG) -> InboundEvent:
    # a private chat: its id is the user's
    return InboundEvent(
        "full", f"telegram:{user}", text, "telegram", user_id=user, metadata={"chat_id": int(user)}
    )


def on_slack(text: str, user: str = SLACK, channel: str = "D0ANA") -> InboundEvent:
    return InboundEvent(
        "full", f"slack:{channel}", text, "slack", user_id=user, metadata={"channel": channel}
    )


async def say(daemon: Daemon, event: InboundEvent) -> str:
    agent = daemon.agent("full")
    assert agent is not None
    reply = await agent.handle(event)
    assert await agent.drain(10)
    assert reply.error is None, reply.error
    return reply.text


async def link_code(daemon: Daemon) -> str:
    match = CODE.search(await say(daemon, on_slack("/link")))
    assert match, "no code given"
    return match.group(1)


async def link_ana(daemon: Daemon, model: MemoryEcho) -> None:
    """Ana's memories on each account, then the refused codes, then the link."""
    await say(daemon, on_slack("remember seat: ANA-SECRET-1 window"))
    await say(daemon, on_slack("remember city: ANA-SECRET-2 Porto"))
    await say(daemon, on_telegram("remember meal: ANA-SECRET-3 vegetarian"))
    await say(daemon, on_telegram("remember city: ANA-SECRET-4 Lisbon"))  # the newer city

    assert "not one I gave" in await say(daemon, on_telegram("/link ZZZZ2222"))
    clock = ManualClock(daemon.resources.people.clock.time())
    daemon.resources.people.clock = clock
    expired = await link_code(daemon)
    clock.advance(601)
    assert "expired" in await say(daemon, on_telegram(f"/link {expired}"))
    assert "Send /link in a direct message" in await say(daemon, on_slack("/link", channel="C0ROOM"))

    code = await link_code(daemon)
    assert "Linked" in await say(daemon, on_telegram(f"/link {code.lower()}"))
    # used once: another account cannot take it again
    assert "used already" in await say(daemon, on_telegram(f"/link {code}", user="99"))


@pytest.mark.both_stores
async def test_linked_accounts_share_memory_and_are_erased_together(
    tmp_path: Path, store_backend: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("postgres_url") if store_backend == "postgres" else None
    write_folder(tmp_path, url)
    model = MemoryEcho()
    async with daemon_on(tmp_path, model) as (daemon, client):
        await link_ana(daemon, model)
        whoami = await say(daemon, on_telegram("/whoami"))
        assert f"slack:{SLACK}" in whoami and f"telegram:{TG}" in whoami
        person = whoami.split()[2].rstrip(":")

        # on Telegram she is shown what she told the agent on Slack, and recall gives the newer city
        await say(daemon, on_telegram("what do you know"))
        system = model.requests[-1].system
        assert "- seat" in system and "- meal" in system and system.count("- city") == 1
        agent = daemon.agent("full")
        assert agent is not None
        recalled = await agent.state.persistent.recall("city", scope=f"user:{TG}", linked=(f"user:{SLACK}",))
        assert "Lisbon" in recalled
        seat = await agent.state.persistent.recall("seat", scope=f"user:{TG}", linked=(f"user:{SLACK}",))
        assert "window" in seat
        events = await audited(agent.state.store, "memory", "merge")
        assert [(e["data"]["key"], e["data"]["scope"]) for e in events] == [("city", f"user:{TG}")]
        assert daemon.daemon_store is not None
        links = await audited(daemon.daemon_store, "person", "link")
        assert links and links[-1]["data"]["accounts"] == [f"slack:{SLACK}", f"telegram:{TG}"]

        # erased by her Slack id alone: both accounts go, links and their audit fields with them
        r = await client.delete(f"/people/{SLACK}")
        assert r.status_code == 200, r.text
        assert r.json()["accounts"] == 2
        assert await daemon.resources.people.of(f"telegram:{TG}") is None
    data = tmp_path / "data"
    for needle in ("ANA-SECRET", SLACK, f"telegram:{TG}", f"user:{TG}", person):
        assert holding(data, url, needle) == [], needle


async def test_unlinking_leaves_each_account_what_it_wrote(tmp_path: Path) -> None:
    write_folder(tmp_path, None)
    model = MemoryEcho()
    async with daemon_on(tmp_path, model) as (daemon, _):
        await link_ana(daemon, model)
        await say(daemon, on_telegram("remember gate: ANA-SECRET-5 B12"))  # written while linked, on Telegram
        assert "Unlinked" in await say(daemon, on_telegram("/unlink"))
        agent = daemon.agent("full")
        assert agent is not None
        assert agent.memory_keys(f"telegram:{TG}", TG) == ["city", "gate", "meal"]
        assert agent.memory_keys("slack:D0ANA", SLACK) == ["city", "seat"]
        assert "linked to no other account" in await say(daemon, on_slack("/whoami"))
        assert daemon.daemon_store is not None
        [unlink] = await audited(daemon.daemon_store, "person", "unlink")
        assert sorted(unlink["data"]["accounts"]) == [f"slack:{SLACK}", f"telegram:{TG}"]


async def test_the_operator_declares_a_person_in_agentd_yaml(tmp_path: Path) -> None:
    write_folder(tmp_path, None, f"people: {{ana: [slack:{SLACK}, telegram:{TG}]}}\n")
    model = MemoryEcho()
    async with daemon_on(tmp_path, model) as (daemon, _):
        assert (await say(daemon, on_slack("/whoami"))).startswith(
            f"You are ana: slack:{SLACK}, telegram:{TG}"
        )
        await say(daemon, on_slack("remember seat: aisle"))
        await say(daemon, on_telegram("hello"))
        assert "- seat" in model.requests[-1].system  # told on Slack, known on Telegram
