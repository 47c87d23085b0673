"""Refused token checks over real HTTP: a 401 first and always, audited coalesced.

Each refusal used to append a chained audit event before the 401 was sent: 200
bad requests made 200 events, and with the database down a stranger got a 503
naming the database's host and port. Now a refusal is only counted (per source
and minute) and the counts are written when the minute is over: the tests move
the daemon's clock for that, rather than waiting a minute.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import httpx
import pytest

from agentd.daemon import Daemon
from agentd.store.queries import AuditEvents
from testkit.postgres import PostgresServer
from tests.support import daemon_on_loopback

TOKEN = "s3cret"
AGENT = "memory: {scope: thread}\nchannels: {webhook: {}}\n"
SETTINGS = f"http: {{token: {TOKEN}}}\n"
T0 = 1_800_000_000.0  # a minute's start


def set_clock(daemon: Daemon, now: float) -> None:
    failures = getattr(daemon, "auth_failures", None)  # before the fix there was none to set
    if failures is not None:
        failures.clock = lambda: now


async def refuse(http: httpx.AsyncClient, count: int) -> None:
    for i in range(count):
        headers = {"Authorization": "Bearer wrong"} if i % 2 else {}
        # distinct paths: what a scanner sends; only MAX_DENIALS of them are itemized
        response = await http.get(f"/agents/probe-{i}/runs", headers=headers)
        assert response.status_code == 401, response.text


async def test_200_refusals_are_one_event_with_the_counts(tmp_path: Path) -> None:
    async with daemon_on_loopback(tmp_path, {"assistant": AGENT}, SETTINGS) as (daemon, url):
        set_clock(daemon, T0 + 5)
        async with httpx.AsyncClient(base_url=url) as http:
            await refuse(http, 200)
            ok = {"Authorization": f"Bearer {TOKEN}"}
            events = (await http.get("/audit", params={"kind": "auth", "limit": 1000}, headers=ok)).json()
    assert len(events["events"]) == 1  # was 200
    [event] = events["events"]
    data = event["data"]
    assert (event["action"], data["client"], data["minute"], data["count"]) == (
        "denied",
        "127.0.0.1",
        T0,
        200,
    )
    assert len(data["denials"]) == 22  # 20 (path, reason) pairs itemized, the rest by reason (2)
    assert sum(d["count"] for d in data["denials"]) == 200
    by_reason = {
        r: sum(d["count"] for d in data["denials"] if d["reason"] == r)
        for r in ("missing token", "wrong token")
    }
    assert by_reason == {"missing token": 100, "wrong token": 100}


async def test_a_minute_over_is_written_without_anyone_reading_the_trail(tmp_path: Path) -> None:
    async with daemon_on_loopback(tmp_path, {"assistant": AGENT}, SETTINGS) as (daemon, url):
        assert daemon.daemon_store is not None
        store = daemon.daemon_store

        async def written() -> list[dict[str, object]]:
            return await store.read(AuditEvents(None, "auth", None, 1000))

        set_clock(daemon, T0 + 1)
        async with httpx.AsyncClient(base_url=url) as http:
            await refuse(http, 3)
            assert await written() == []  # counted, not written: the minute is not over
            set_clock(daemon, T0 + 61)
            await refuse(http, 1)  # the next refusal after the minute writes it
            first: list[dict[str, object]] = []
            for _ in range(500):  # at most 5 s: the write is a task of its own
                if first := await written():
                    break
                await asyncio.sleep(0.01)
            assert [e["data"]["count"] for e in first] == [3]  # type: ignore[index]
            set_clock(daemon, T0 + 125)
            await daemon.auth_failures.flush()  # the periodic flush: the second minute is over too
        events = await written()
        assert [(e["data"]["minute"], e["data"]["count"]) for e in events] == [(T0, 3), (T0 + 60, 1)]


async def test_with_the_database_gone_a_stranger_still_gets_401(
    tmp_path: Path, postgres_server: PostgresServer, postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings = f"{SETTINGS}store: {{url: '{postgres_url}'}}\n"
    async with daemon_on_loopback(tmp_path, {"assistant": AGENT}, settings) as (daemon, url):
        set_clock(daemon, T0 + 1)
        postgres_server.drop_database(postgres_url.rsplit("/", 1)[1])  # every connection cut, none possible
        async with httpx.AsyncClient(base_url=url) as http:
            for headers in ({}, {"Authorization": "Bearer wrong"}) * 10:
                response = await http.get("/agents", headers=headers)
                assert response.status_code == 401, response.text  # was a 503 naming the database
                assert str(postgres_server.port) not in response.text
        set_clock(daemon, T0 + 61)
        with caplog.at_level(logging.WARNING, "agentd.http.auth_failures"):
            await daemon.auth_failures.flush()  # the store fails: logged with the counts, never raised
        assert "could not audit 20 failed token checks from 127.0.0.1" in caplog.text
        assert daemon.auth_failures.pending == 0
