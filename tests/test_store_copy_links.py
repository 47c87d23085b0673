"""`agentd store copy` carries the daemon's links into PostgreSQL: Ana linked on SQLite (by a code) is
one person for a daemon on the database; a second copy adds nothing; an account the database already
links into another person is left as it is there, and said."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentd.cli import main
from agentd.store.link_queries import People, PeopleVersion
from tests.test_person_data import MemoryEcho, daemon_on
from tests.test_person_links import SLACK, TG, link_code, on_slack, on_telegram, say, write_folder


def copy(root: Path, url: str) -> int:
    return main(
        ["store", "copy", "--to", url, "--agents", str(root / "agents"), "--data", str(root / "data")]
    )


async def test_links_made_on_sqlite_hold_on_postgresql_after_the_copy(
    tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sqlite_root, pg_root = tmp_path / "sqlite", tmp_path / "pg"
    write_folder(sqlite_root, None)
    model = MemoryEcho()
    async with daemon_on(sqlite_root, model) as (daemon, _):
        await say(daemon, on_slack("remember seat: ANA-SECRET-1 window"))
        assert "Linked" in await say(daemon, on_telegram(f"/link {await link_code(daemon)}"))
        await daemon.people.link("bob", ["slack:UBOB", "telegram:77"], "cli", "cli")

    # the database links telegram:77 into someone else already (a daemon there did)
    write_folder(pg_root, postgres_url)
    async with daemon_on(pg_root, model) as (daemon, _):
        await daemon.people.link("robert", ["telegram:77", "discord:77"], "http", "http:127.0.0.1")

    assert await asyncio.to_thread(copy, sqlite_root, postgres_url) == 0
    out = capsys.readouterr().out
    assert (
        "_daemon: links: 4 in the file: 3 copied, 0 already there; telegram:77 (of bob in the file) is "
        "robert's in the database: left so"
    ) in out

    async with daemon_on(pg_root, model) as (daemon, _):
        assert daemon.daemon_store is not None
        people = {p.person: p.accounts for p in await daemon.daemon_store.read(People())}
        [ana] = [name for name in people if name not in ("bob", "robert")]
        assert people[ana] == (f"slack:{SLACK}", f"telegram:{TG}")
        assert people["bob"] == ("slack:UBOB",) and people["robert"] == ("discord:77", "telegram:77")
        version = await daemon.daemon_store.read(PeopleVersion())
        # the copied agent's memory, told on Slack, is Ana's on Telegram on the database
        await say(daemon, on_telegram("what do you know"))
        assert "- seat" in model.requests[-1].system

    assert await asyncio.to_thread(copy, sqlite_root, postgres_url) == 0
    assert "_daemon: links: 4 in the file: 0 copied, 3 already there" in capsys.readouterr().out
    async with daemon_on(pg_root, model) as (daemon, _):
        assert daemon.daemon_store is not None
        assert await daemon.daemon_store.read(PeopleVersion()) == version  # nothing added: not moved
