"""The operator's read surfaces of scheduled jobs: GET /agents/{agent}/jobs (+ one job with its fires and
deliveries), behind the token like every agent route and in the OpenAPI document, and `agentd jobs`,
which answers the same from the store read-only or through the daemon that owns it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from agentd.daemon import Daemon
from agentd.engine.jobs import Asker, JobBook, local_time
from agentd.http.bodies import iso
from agentd.store.base import Store, write_one
from agentd.store.job_queries import JobById
from agentd.store.job_records import DeliveryRecord, FireRecord
from agentd.store.job_writes import CompleteFire, DeliveryAttempt, InsertDelivery
from tests.daemon_process import DaemonProcess
from tests.support import agentd_cli, open_api

BOT = """\
purpose: You keep the team on track.
channels:
  webhook: {deliver_url: "https://hooks.example/agentd", signing_secret: 0123456789abcdef0123}
schedule:
  timezone: Europe/Lisbon
"""
ANA = Asker("webhook:ana", "ana", "webhook:t-1")


def parts(daemon: Daemon) -> tuple[JobBook, Store]:
    agent = daemon.agent("bot")
    assert agent is not None
    return agent.state.jobs, agent.state.store


async def some_jobs(daemon: Daemon) -> dict[str, str]:
    """A task fired once (one delivery sent, one still pending after a 503), a reminder, a cancelled one."""
    book, store = parts(daemon)
    standup = await book.create(ANA, "cron 0 9 * * 1-5", "Summarise what is still open.", "task")
    water = await book.create(ANA, "every 2h", "drink water", "reminder", "America/New_York")
    gone = await book.create(ANA, "every 1d", "stretch", "reminder")
    await book.set_status(ANA, gone.id, "cancelled")
    assert standup.next_fire_at is not None
    at = standup.next_fire_at
    fired = FireRecord(standup.id, at, "schedule", "ok", "run-1", at, at + 2)
    following = book.clock.time() + 86400 * 3
    await store.write(
        CompleteFire(fired, following, 0, "active", None, at + 2),
        InsertDelivery(
            DeliveryRecord(
                "dl-1", standup.id, at, "webhook:t-1", ANA.who, "ana", "All done.", "pending", 0, at, at
            )
        ),
        InsertDelivery(
            DeliveryRecord(
                "dl-2", standup.id, at, "webhook:t-1", ANA.who, "ana", "Again.", "pending", 0, at, at
            )
        ),
    )
    await write_one(store, DeliveryAttempt("dl-1", "sent", 1, at, at + 3, None))
    await write_one(
        store,
        DeliveryAttempt(
            "dl-2", "pending", 1, at + 60, None, "https://hooks.example/agentd answered HTTP 503"
        ),
    )
    return {"standup": standup.id, "water": water.id, "gone": gone.id}


async def get(client: httpx.AsyncClient, path: str, status: int = 200, **params: Any) -> Any:
    r = await client.get(path, params=params)
    assert r.status_code == status, r.text
    return r.json()


async def test_the_jobs_are_listed_with_their_next_fire_in_their_zone(tmp_path: Path) -> None:
    daemon, client = await open_api(tmp_path, {"bot": BOT})
    try:
        ids = await some_jobs(daemon)
        _, store = parts(daemon)
        listed = (await get(client, "/agents/bot/jobs"))["jobs"]
        assert [j["id"] for j in listed] == [ids["standup"], ids["water"]]  # the cancelled one is not
        standup, water = listed
        stored = await store.read(JobById(ids["standup"]))
        assert stored is not None and stored.next_fire_at is not None
        assert standup == {
            "id": ids["standup"],
            "name": None,
            "kind": "task",
            "text": "Summarise what is still open.",
            "schedule": "cron 0 9 * * 1-5",
            "describe": "At 09:00 on Monday through Friday (Europe/Lisbon)",
            "timezone": "Europe/Lisbon",
            "status": "active",
            "paused_reason": None,
            "next_fire_at": iso(stored.next_fire_at),
            "next_fire_local": local_time(stored.next_fire_at, "Europe/Lisbon"),
            "failures": 0,
            "owner": "webhook:ana",
            "conversation_key": "webhook:t-1",
            "deliver_to": "webhook:t-1",
            "created_at": iso(stored.created_at),
            "updated_at": iso(stored.updated_at),
        }
        assert (water["describe"], water["timezone"]) == ("every 2h", "America/New_York")
        assert water["next_fire_local"].endswith(("EST", "EDT"))
        every = (await get(client, "/agents/bot/jobs", ended="true"))["jobs"]
        assert [(j["id"], j["status"]) for j in every][-1] == (ids["gone"], "cancelled")
        assert (await get(client, "/agents/bot/jobs", conversation_key="webhook:elsewhere"))["jobs"] == []
        assert len((await get(client, "/agents/bot/jobs", conversation_key="webhook:t-1"))["jobs"]) == 2
        bad = await get(client, "/agents/bot/jobs", 400, conversation_key="t-1")
        assert bad["error"] == "not a conversation key: 't-1' (expected <channel>:<id>, e.g. webhook:t-1)"
        assert (await get(client, "/agents/nobody/jobs", 404))["error"] == "no agent named 'nobody'"
    finally:
        await client.aclose()
        await daemon.shutdown()


async def test_one_job_with_its_fires_and_deliveries(tmp_path: Path) -> None:
    daemon, client = await open_api(tmp_path, {"bot": BOT})
    try:
        ids = await some_jobs(daemon)
        found = await get(client, f"/agents/bot/jobs/{ids['standup']}")
        assert found["job"]["id"] == ids["standup"]
        [fire] = found["fires"]
        assert (fire["trigger"], fire["status"], fire["run_id"]) == ("schedule", "ok", "run-1")
        assert fire["daemon"] == daemon.daemon_id  # stamped by the store that wrote it
        assert fire["fire_at"].endswith("Z")
        by_id = {d["id"]: d for d in found["deliveries"]}
        assert (by_id["dl-1"]["status"], by_id["dl-1"]["attempts"], by_id["dl-1"]["last_error"]) == (
            "sent",
            1,
            None,
        )
        assert by_id["dl-1"]["sent_at"].endswith("Z")
        pending = by_id["dl-2"]
        assert (pending["status"], pending["sent_at"]) == ("pending", None)
        assert pending["last_error"] == "https://hooks.example/agentd answered HTTP 503"
        assert "user_id" not in pending  # the platform id stays in the store
        missing = await get(client, "/agents/bot/jobs/jdeadbeef00", 404)
        assert missing["error"] == "no job 'jdeadbeef00' in agent 'bot'"
        bad = await get(client, "/agents/bot/jobs/no%20such", 400)
        assert bad["error"].startswith("not a job id: 'no such'")
    finally:
        await client.aclose()
        await daemon.shutdown()


async def test_the_routes_need_the_token_and_are_documented(tmp_path: Path) -> None:
    daemon, client = await open_api(tmp_path, {"bot": BOT}, token="s3cret")
    try:
        assert (await client.get("/agents/bot/jobs")).status_code == 401
        assert (await client.get("/agents/bot/jobs/j1")).status_code == 401
        client.headers["Authorization"] = "Bearer s3cret"
        assert (await get(client, "/agents/bot/jobs"))["jobs"] == []
        document = await get(client, "/openapi.json")
        for path in ("/agents/{agent}/jobs", "/agents/{agent}/jobs/{job_id}"):
            responses = document["paths"][path]["get"]["responses"]
            assert {"200", "400", "401", "404", "503"} <= set(responses), path
    finally:
        await client.aclose()
        await daemon.shutdown()


async def test_agentd_jobs_reads_the_store_or_asks_the_daemon_and_says_the_same(tmp_path: Path) -> None:
    daemon, client = await open_api(tmp_path, {"bot": BOT})
    try:
        ids = await some_jobs(daemon)
    finally:
        await client.aclose()
        await daemon.shutdown()
    here = agentd_cli(tmp_path, "jobs", "bot", "--json")
    assert here.returncode == 0, here.stderr
    detail_here = agentd_cli(tmp_path, "jobs", "bot", ids["standup"], "--json")
    text = agentd_cli(tmp_path, "jobs", "bot")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert [line.split()[0] for line in lines] == [ids["standup"], ids["water"]]
    assert "At 09:00 on Monday through Friday (Europe/Lisbon); next " in lines[0]
    assert lines[1].endswith("webhook:t-1  'drink water'")
    shown = agentd_cli(tmp_path, "jobs", "bot", ids["standup"])
    assert (
        "deliveries (newest first):" in shown.stdout
        and "last error: https://hooks.example/agentd answered HTTP 503" in shown.stdout
    )
    nothing = agentd_cli(tmp_path, "jobs", "bot", "jdeadbeef00")
    assert (nothing.returncode, nothing.stderr.strip()) == (1, "agentd: no job 'jdeadbeef00' in agent 'bot'")

    running = await DaemonProcess(tmp_path).start()
    try:
        there = agentd_cli(tmp_path, "jobs", "bot", "--json")
        detail_there = agentd_cli(tmp_path, "jobs", "bot", ids["standup"], "--json")
        gone = agentd_cli(tmp_path, "jobs", "bot", "jdeadbeef00")
    finally:
        running.stop()
    assert there.returncode == 0, there.stderr
    assert json.loads(there.stdout) == json.loads(here.stdout)
    assert json.loads(detail_there.stdout) == json.loads(detail_here.stdout)
    assert gone.returncode == 1 and gone.stderr.strip().endswith(
        "answered 404: no job 'jdeadbeef00' in agent 'bot'"
    )
