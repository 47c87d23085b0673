"""The HTTP API: happy paths, and a 4xx with a reason for every bad input (never a 500)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from agentd.daemon import Daemon
from agentd.errors import OperatorError
from agentd.http.app import create_app

ASSISTANT = "memory: {scope: thread, persistent: true}\nchannels: {webhook: {}}\n"


def write_agents(root: Path, token: str | None = None) -> Path:
    agents = root / "agents"
    agents.mkdir()
    (agents / "assistant.yaml").write_text(ASSISTANT)
    (agents / "quiet.yaml").write_text("purpose: no webhook here\n")
    if token:
        (root / "agentd.yaml").write_text(f"http:\n  token: {token}\n")
    return agents


async def open_daemon(root: Path, token: str | None = None) -> Daemon:
    daemon = Daemon(write_agents(root, token), root / "data", reload_interval=60)
    await daemon.start()
    return daemon


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    daemon = await open_daemon(tmp_path)
    transport = httpx.ASGITransport(app=create_app(daemon))
    async with httpx.AsyncClient(transport=transport, base_url="http://agentd") as client:
        yield client
    await daemon.shutdown()


@pytest.fixture
async def secured(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, Daemon]]:
    daemon = await open_daemon(tmp_path, token="s3cret")
    transport = httpx.ASGITransport(app=create_app(daemon))
    async with httpx.AsyncClient(transport=transport, base_url="http://agentd") as client:
        yield client, daemon
    await daemon.shutdown()


async def post(
    api: httpx.AsyncClient, body: object, agent: str = "assistant", **kw: object
) -> httpx.Response:
    content = body if isinstance(body, str | bytes) else json.dumps(body)
    return await api.post(f"/agents/{agent}/messages", content=content, **kw)  # type: ignore[arg-type]


async def test_a_message_gets_a_reply(api: httpx.AsyncClient) -> None:
    r = await post(api, {"conversation_id": "t-1", "text": "hello", "user_id": "ana"})
    assert r.status_code == 200
    body = r.json()
    assert body["conversation_key"] == "webhook:t-1" and body["run_id"]
    assert "I see 0 earlier messages" in body["reply"]
    r = await post(api, {"conversation_id": "t-1", "text": "again"})
    assert "I see 2 earlier messages" in r.json()["reply"]


async def test_a_message_may_say_when_it_was_sent(api: httpx.AsyncClient) -> None:
    for conversation_id, sent_at in (("t-z", "2023-05-08T13:56:00Z"), ("t-naive", "2023-05-08T13:56:00")):
        r = await post(api, {"conversation_id": conversation_id, "text": "hello", "sent_at": sent_at})
        assert r.status_code == 200, r.text
        stored = (await api.get(f"/agents/assistant/conversations/webhook:{conversation_id}")).json()
        assert stored["messages"][0]["sent_at"] == 1683554160.0  # UTC when no offset is given


async def test_commands_run_over_http(api: httpx.AsyncClient) -> None:
    r = await post(api, {"conversation_id": "t-1", "text": "/status"})
    assert r.status_code == 200 and r.json()["reply"].startswith("Agent: assistant")


@pytest.mark.parametrize(
    ("body", "status", "reason"),
    [
        ("{not json", 400, "malformed JSON"),
        ("[1, 2]", 400, "expected a JSON object"),
        ({"text": "hi"}, 422, "conversation_id"),
        ({"conversation_id": "a"}, 422, "text"),
        ({"conversation_id": "a", "text": ""}, 422, "text"),
        ({"conversation_id": "has space", "text": "hi"}, 422, "conversation_id"),
        ({"conversation_id": "x" * 129, "text": "hi"}, 422, "conversation_id"),
        ({"conversation_id": "a", "text": 5}, 422, "text"),
        ({"conversation_id": "a", "text": "hi", "extra": 1}, 422, "extra"),
        ({"conversation_id": "a", "text": "x" * 32001}, 422, "at most 32000 characters"),
        ({"conversation_id": "a", "text": "hi", "sent_at": "yesterday"}, 422, "sent_at"),
        # stored, it would fail every later recall of it (a 500 at each turn of that person)
        ({"conversation_id": "a", "text": "hi", "sent_at": 1e300}, 422, "between the years 1 and 9999"),
        ({"conversation_id": "a", "text": "hi", "sent_at": -1e20}, 422, "between the years 1 and 9999"),
    ],
    ids=[
        "malformed",
        "not-object",
        "no-id",
        "no-text",
        "empty-text",
        "bad-id",
        "long-id",
        "text-type",
        "extra",
        "oversize",
        "bad-sent-at",
        "sent-at-past-9999",
        "sent-at-before-year-1",
    ],
)
async def test_bad_message_bodies(api: httpx.AsyncClient, body: object, status: int, reason: str) -> None:
    r = await post(api, body)
    assert r.status_code == status, r.text
    assert reason in r.text


async def test_a_date_time_its_offset_carries_past_the_years_1_to_9999_is_the_nearest_second_of_them(
    api: httpx.AsyncClient,
) -> None:
    """Every RFC 3339 date-time the document allows is taken (a validator cannot bound an offset): one
    whose offset carries it past 9999-12-31T23:59:59Z, or before year 1, in UTC is that bound."""
    for sent_at in ("9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00+01:00"):
        r = await post(api, {"conversation_id": "edge", "text": "hi", "sent_at": sent_at})
        assert r.status_code == 200, r.text
        assert r.json()["error"] is None


async def test_an_oversized_body_is_413_before_parsing(api: httpx.AsyncClient) -> None:
    r = await post(api, "x" * 1_100_000)  # over http.max_body_bytes (1 MiB)
    assert r.status_code == 413 and "limit" in r.json()["error"]


async def test_unknown_agent_and_agent_without_webhook(api: httpx.AsyncClient) -> None:
    r = await post(api, {"conversation_id": "a", "text": "hi"}, agent="nobody")
    assert r.status_code == 404 and "no agent named 'nobody'" in r.json()["error"]
    r = await post(api, {"conversation_id": "a", "text": "hi"}, agent="quiet")
    assert r.status_code == 404 and "no webhook channel" in r.json()["error"]
    assert (await api.get("/agents/nobody/runs")).status_code == 404
    assert (await api.get("/nowhere")).status_code == 404


async def test_read_endpoints(api: httpx.AsyncClient) -> None:
    await post(api, {"conversation_id": "c", "text": "remember color: blue"})
    agents = (await api.get("/agents")).json()["agents"]
    assert [a["name"] for a in agents] == ["assistant", "quiet"]
    assert agents[0]["status"] == "running" and agents[0]["model"] == "offline/offline"
    assert agents[0]["channels"] == [{"name": "webhook", "status": "running", "error": None, "held_by": None}]

    runs = (await api.get("/agents/assistant/runs", params={"conversation_key": "webhook:c"})).json()["runs"]
    assert len(runs) == 1 and runs[0]["trigger"] == "message" and runs[0]["tokens_estimated"] is True
    assert runs[0]["started_at"].endswith("Z")

    events = (await api.get("/audit", params={"agent": "assistant", "kind": "memory"})).json()["events"]
    assert [(e["kind"], e["action"], e["data"]) for e in events] == [("memory", "remember", {"key": "color"})]
    assert events[0]["agent"] == "assistant" and events[0]["conversation_key"] == "webhook:c"
    config = (await api.get("/audit", params={"kind": "config"})).json()["events"]
    assert {e["agent"] for e in config} == {"assistant", "quiet"}
    assert (await api.get("/audit", params={"since": "2999-01-01T00:00:00Z"})).json()["events"] == []

    conv = (await api.get("/agents/assistant/conversations/webhook:c")).json()
    assert conv["thread_id"] == 1 and len(conv["messages"]) == 4 and "- color" in conv["system"]
    assert conv["context"]["compact_at_tokens"] == 50000

    status = (await api.get("/agents/assistant/status", params={"conversation_key": "webhook:c"})).json()
    assert status["offline"] is True and status["totals"]["message_runs"] == 1
    assert status["memory_keys"] == ["color"]
    health = (await api.get("/healthz")).json()
    # which daemon answered, and the one that ran the run and wrote the event (several may share a store)
    assert health["ok"] is True and health["daemon"] == runs[0]["daemon"] == events[0]["daemon"]
    schema = (await api.get("/openapi.json")).json()
    assert "/agents/{agent}/messages" in schema["paths"]


@pytest.mark.parametrize(
    ("params", "status"),
    [
        ({"since": "yesterday"}, 400),
        ({"since": "nan"}, 400),
        ({"since": "2024-02-30T00:00:00Z"}, 400),
        ({"limit": "0"}, 422),
        ({"limit": "many"}, 422),
        ({"agent": "ghost"}, 404),
    ],
)
async def test_bad_audit_queries(api: httpx.AsyncClient, params: dict[str, str], status: int) -> None:
    r = await api.get("/audit", params=params)
    assert r.status_code == status and r.json()["error"]


@pytest.mark.parametrize(
    "since",
    [
        "2024-05-03T10:00:00Z",
        "2024-05-03t10:00:00z",  # RFC 3339 allows lower case
        "2024-05-03T10:00:00.123456789+02:00",  # any number of fraction digits
        "2016-12-31T23:59:60Z",  # a leap second
        "2024-05-03 10:00:00",  # a space, and no offset: UTC
        "2024-05-03",
        "1714730400",
        "1714730400.5",
        "",  # no filter
    ],
)
async def test_every_documented_form_of_since_is_accepted(api: httpx.AsyncClient, since: str) -> None:
    """`since` is documented as epoch seconds or an RFC 3339 date-time: each is a time, never a 400."""
    r = await api.get("/audit", params={"since": since})
    assert r.status_code == 200, r.text


async def test_status_needs_a_conversation_key(api: httpx.AsyncClient) -> None:
    r = await api.get("/agents/assistant/status")
    assert r.status_code == 422 and "conversation_key" in r.text


async def test_token_guards_every_route_but_healthz(secured: tuple[httpx.AsyncClient, Daemon]) -> None:
    api, _daemon = secured
    assert (await api.get("/healthz")).status_code == 200
    r = await post(api, {"conversation_id": "a", "text": "hi"})
    assert r.status_code == 401 and "missing bearer token" in r.json()["error"]
    r = await api.get("/agents", headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401 and "wrong bearer token" in r.json()["error"]
    ok = {"Authorization": "Bearer s3cret"}
    assert (await post(api, {"conversation_id": "a", "text": "hi"}, headers=ok)).status_code == 200
    # refusals are audited coalesced: one event per source and minute, with the counts
    [event] = (await api.get("/audit", params={"kind": "auth"}, headers=ok)).json()["events"]
    assert event["action"] == "denied" and event["data"]["count"] == 2
    assert sorted((d["reason"], d["count"]) for d in event["data"]["denials"]) == [
        ("missing token", 1),
        ("wrong token", 1),
    ]


def test_non_loopback_host_needs_a_token(tmp_path: Path) -> None:
    agents = write_agents(tmp_path)
    with pytest.raises(OperatorError, match=r"refusing to listen on 0\.0\.0\.0 without a token"):
        Daemon(agents, tmp_path / "data", host="0.0.0.0")
    Daemon(agents, tmp_path / "data", host="127.0.0.2")  # loopback is fine


@pytest.mark.parametrize(
    "path", ["/agents/assistant/conversations/nocolon", "/agents/assistant/status?conversation_key=bad%20key"]
)
async def test_bad_conversation_keys_are_400(api: httpx.AsyncClient, path: str) -> None:
    r = await api.get(path)
    assert r.status_code == 400 and "not a conversation key" in r.json()["error"]


async def test_a_number_past_the_years_1_to_9999_is_refused_as_since_too(api: httpx.AsyncClient) -> None:
    """The document bounds a number (written as text in a query too): past the bound it is a 400."""
    r = await api.get("/audit", params={"since": "253402300800.0"})
    assert r.status_code == 400, r.text
