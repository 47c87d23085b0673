"""`agentd person link|unlink|show` on the data folder with no daemon and through a running one, and
`agentd person export|erase` with no daemon covering every account of a linked person."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import httpx

from agentd.daemon import Daemon
from agentd.store.link_queries import PersonAccounts
from agentd.store.queries import AuditEvents
from tests.daemon_process import DaemonProcess
from tests.support import agentd_cli
from tests.test_person_data import MemoryEcho, daemon_on, holding
from tests.test_person_links import SLACK, TG, on_slack, on_telegram, say, write_folder

ANA = "ana-lisboa"  # the person's name: erased too, so it is looked for in every byte


def person(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return agentd_cli(root, "person", *args, "--agents", "agents", "--data", "data")


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_links_made_with_no_daemon_are_the_daemons_and_export_and_erase_follow_them(
    tmp_path: Path,
) -> None:
    write_folder(tmp_path, None)
    model = MemoryEcho()
    async with daemon_on(tmp_path, model) as (daemon, _):
        await say(daemon, on_slack("remember seat: ANA-SECRET-1 window"))
        await say(daemon, on_telegram("remember meal: ANA-SECRET-2 vegetarian"))
        await say(daemon, on_slack("remember city: ANA-SECRET-3 Porto"))
        await say(daemon, on_telegram("remember city: ANA-SECRET-4 Lisbon"))  # the newer city

    linked = await asyncio.to_thread(person, tmp_path, "link", ANA, f"slack:{SLACK}", f"telegram:{TG}")
    assert ok(linked).splitlines() == [
        f"slack:{SLACK}: linked",
        f"telegram:{TG}: linked",
        f"{ANA}: slack:{SLACK}, telegram:{TG}",
    ]
    assert (
        ok(await asyncio.to_thread(person, tmp_path, "show", TG)) == f"{ANA}: slack:{SLACK}, telegram:{TG}\n"
    )
    taken = await asyncio.to_thread(person, tmp_path, "link", "bob", f"telegram:{TG}")
    assert taken.returncode == 1 and f"telegram:{TG} is linked to {ANA} already" in taken.stderr
    nobody = await asyncio.to_thread(person, tmp_path, "show", "nobody")
    assert nobody.returncode == 1 and "no person with linked accounts" in nobody.stderr
    two = await asyncio.to_thread(person, tmp_path, "show", ANA, "bob")
    assert two.returncode == 1 and "takes one user id or name" in two.stderr

    # a daemon started on the folder holds the link: Ana on Telegram is shown what she said on Slack
    async with daemon_on(tmp_path, model) as (daemon, _):
        await say(daemon, on_telegram("what do you know"))
        assert "- seat" in model.requests[-1].system
        # the key both accounts held is audited as merged in the agent's trail, as a daemon's link does
        agent = daemon.agent("full")
        assert agent is not None
        merges = [
            e for e in await agent.state.store.read(AuditEvents(kind="memory")) if e["action"] == "merge"
        ]
        assert [e["data"] for e in merges] == [
            {"key": "city", "scope": f"user:{TG}", "over": [f"user:{SLACK}"]}
        ]
        assert daemon.daemon_store is not None
        trail = await daemon.daemon_store.read(AuditEvents(kind="person"))
        assert [(e["action"], e["data"]["accounts"], e["data"]["by"]) for e in trail] == [
            ("link", [f"slack:{SLACK}"], "cli"),
            ("link", [f"telegram:{TG}"], "cli"),
        ]

    exported = json.loads(ok(await asyncio.to_thread(person, tmp_path, "export", ANA)))
    assert exported["person"] == ANA and exported["accounts"] == [f"slack:{SLACK}", f"telegram:{TG}"]
    values = {m["value"] for m in exported["agents"]["full"]["memories"]}
    assert any("ANA-SECRET-1" in v for v in values) and any("ANA-SECRET-2" in v for v in values)

    ok(await asyncio.to_thread(person, tmp_path, "erase", TG))  # by one bare user id: both accounts go
    for needle in ("ANA-SECRET", SLACK, f"telegram:{TG}", f"user:{TG}", ANA):
        assert holding(tmp_path / "data", None, needle) == [], needle


async def test_beside_a_running_daemon_the_cli_links_through_its_api(tmp_path: Path) -> None:
    write_folder(tmp_path, None)
    daemon = await DaemonProcess(tmp_path).start()
    try:
        ok(await asyncio.to_thread(person, tmp_path, "link", ANA, f"slack:{SLACK}", f"telegram:{TG}"))
        async with httpx.AsyncClient(base_url=daemon.url, trust_env=False) as api:
            shown = (await api.get(f"/people/{ANA}")).json()
            assert shown["accounts"] == [f"slack:{SLACK}", f"telegram:{TG}"]
            taken = await asyncio.to_thread(person, tmp_path, "link", "bob", f"slack:{SLACK}")
            assert taken.returncode == 1
            assert "answered 409" in taken.stderr and f"linked to {ANA} already" in taken.stderr
            assert ok(await asyncio.to_thread(person, tmp_path, "show", f"slack:{SLACK}")).startswith(
                f"{ANA}: "
            )
            unlinked = ok(await asyncio.to_thread(person, tmp_path, "unlink", ANA, f"telegram:{TG}"))
            assert unlinked == f"{ANA}: no linked accounts\n"
            assert (await api.get(f"/people/{ANA}")).status_code == 404
            missing = await asyncio.to_thread(person, tmp_path, "unlink", ANA, f"telegram:{TG}")
            assert missing.returncode == 1 and "answered 404" in missing.stderr
    finally:
        daemon.stop()
    # what the daemon wrote: no link left, and the link and unlink audited as asked over its API
    stopped = Daemon(tmp_path / "agents", tmp_path / "data", reload_interval=60)
    await stopped.start()
    try:
        assert stopped.daemon_store is not None
        assert await stopped.daemon_store.read(PersonAccounts(ANA)) is None
        trail = [e for e in await stopped.daemon_store.read(AuditEvents(kind="person"))]
        assert [e["action"] for e in trail] == ["link", "link", "unlink"]
        assert all(e["data"]["by"] == "http:127.0.0.1" for e in trail)
    finally:
        await stopped.shutdown()
