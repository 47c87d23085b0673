"""agentd.yaml's `people:` across restarts: what the file declares is linked at start, and what it
declared before and declares no more is unlinked (audited, `source: config`); links made otherwise
stay, unless unlink's rule takes them (a person of one account is no person)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentd.daemon import Daemon
from agentd.store.link_queries import People
from agentd.store.queries import AuditEvents
from tests.test_person_data import MemoryEcho, daemon_on
from tests.test_person_links import write_folder


async def people_of(daemon: Daemon) -> dict[str, list[str]]:
    assert daemon.daemon_store is not None
    return {p.person: list(p.accounts) for p in await daemon.daemon_store.read(People())}


async def trail(daemon: Daemon) -> list[tuple[str, str, list[str], str]]:
    assert daemon.daemon_store is not None
    events = await daemon.daemon_store.read(AuditEvents(kind="person"))
    return [(e["action"], e["data"]["person"], e["data"]["accounts"], e["data"]["source"]) for e in events]


@pytest.mark.both_stores
async def test_a_person_taken_out_of_agentd_yaml_is_unlinked_at_the_next_start(
    tmp_path: Path, store_backend: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("postgres_url") if store_backend == "postgres" else None
    model = MemoryEcho()
    write_folder(
        tmp_path, url, "people: {ana: [slack:UA, telegram:42, discord:7], bob: [slack:UB, telegram:77]}\n"
    )
    async with daemon_on(tmp_path, model) as (daemon, _):
        await daemon.people.add_account("ana", "webhook:ana-web", "http", "http:127.0.0.1")
        assert await people_of(daemon) == {
            "ana": ["discord:7", "slack:UA", "telegram:42", "webhook:ana-web"],
            "bob": ["slack:UB", "telegram:77"],
        }
        before = len(await trail(daemon))

    # discord:7 and bob are out of the file; the account linked over HTTP is not the file's
    write_folder(tmp_path, url, "people: {ana: [slack:UA, telegram:42]}\n")
    async with daemon_on(tmp_path, model) as (daemon, _):
        assert await people_of(daemon) == {"ana": ["slack:UA", "telegram:42", "webhook:ana-web"]}
        assert (await trail(daemon))[before:] == [
            ("unlink", "ana", ["discord:7"], "config"),
            ("unlink", "bob", ["slack:UB", "telegram:77"], "config"),  # one left: no person, so both
        ]
        before = len(await trail(daemon))

    # the same file again changes nothing
    async with daemon_on(tmp_path, model) as (daemon, _):
        assert len(await trail(daemon)) == before

    # no people at all: ana's declared accounts go, and with them the one she is left with
    write_folder(tmp_path, url, "")
    async with daemon_on(tmp_path, model) as (daemon, _):
        assert await people_of(daemon) == {}
        assert (await trail(daemon))[before:] == [
            ("unlink", "ana", ["slack:UA"], "config"),
            ("unlink", "ana", ["telegram:42", "webhook:ana-web"], "config"),
        ]
