"""What /ui/ shows a new user (issue 17, item 23): warnings (a missing key, memory that will do less),
why a rejected agent is rejected, approvals a run is paused on, and an audit trail in pages, newest last
as GET /audit lists it."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from tests.support import send, serving

ASK = "memory: {scope: thread, persistent: true, writes: ask}\nchannels: {webhook: {}}\n"
PLAIN = "memory: {scope: thread, persistent: true}\nchannels: {webhook: {}}\n"


def text_of(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


async def test_the_agents_page_shows_warnings_and_why_an_agent_is_rejected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    agents = {
        "remote": "model: openai/gpt-4.1-mini\nchannels: {webhook: {}}\n",
        "broken": "purpose: x\nmodle: offline\n",
    }
    async with serving(tmp_path, agents) as (_, client):
        page = text_of((await client.get("/ui/")).text)
        agent_page = await client.get("/ui/agents/remote")
        rejected = await client.get("/ui/agents/broken")
    assert "provider openai (model gpt-4.1-mini): no API key: set OPENAI_API_KEY" in page
    assert "broken.yaml:2:1: unknown key 'modle'" in page
    assert "no API key: set OPENAI_API_KEY" in text_of(agent_page.text)
    assert rejected.status_code == 503
    assert "broken.yaml:2:1: unknown key 'modle'" in text_of(rejected.text)


async def test_a_run_paused_on_an_approval_shows_on_its_conversation_and_its_agent(tmp_path: Path) -> None:
    async with serving(tmp_path, {"keeper": ASK}) as (_, client):
        r = await client.post(
            "/agents/keeper/messages",
            json={"conversation_id": "c", "text": "remember city: Lisbon", "user_id": "ana"},
        )
        approval = r.json()["approval"]
        assert approval
        conversation = text_of((await client.get("/ui/agents/keeper/conversations/webhook:c")).text)
        agent = text_of((await client.get("/ui/agents/keeper")).text)
        await client.post(
            "/agents/keeper/messages",
            json={"conversation_id": "c", "text": f"/approve {approval}", "user_id": "ana"},
        )
        after = text_of((await client.get("/ui/agents/keeper/conversations/webhook:c")).text)
    assert "Paused: waiting for approval" in conversation and approval in conversation
    assert "remember" in conversation and "ana" in conversation
    assert "no runs yet" not in conversation
    assert "no finished runs yet: one is paused, waiting for approval (above)" in conversation
    assert "Waiting for approval" in agent and approval in agent and "webhook:c" in agent
    assert "Paused: waiting for approval" not in after


async def test_the_audit_page_is_in_pages_newest_last(tmp_path: Path) -> None:
    async with serving(tmp_path, {"a": PLAIN}) as (_, client):
        for i in range(130):
            await send(client, "a", "c", f"remember k{i:03d}: v")
        api = (await client.get("/audit", params={"agent": "a", "kind": "memory", "limit": 100})).json()[
            "events"
        ]
        first = (await client.get("/ui/audit", params={"agent": "a", "kind": "memory"})).text
        second = (await client.get("/ui/audit", params={"agent": "a", "kind": "memory", "page": "2"})).text
        bad = await client.get("/ui/audit", params={"page": "0"})

    def keys(page: str) -> list[str]:
        """The memory keys of the events shown, in the page's order (the data column is escaped JSON)."""
        return re.findall(r"&#34;key&#34;: &#34;(k\d{3})&#34;", page)

    assert keys(first) == [f"k{i:03d}" for i in range(30, 130)]  # the newest 100, newest last
    assert keys(first) == [e["data"]["key"] for e in api]  # as GET /audit lists them
    assert keys(second) == [f"k{i:03d}" for i in range(30)]
    assert 'id="older"' in first and "page=2" in first and 'id="newer"' not in first
    assert 'id="newer"' in second and 'id="older"' not in second
    assert bad.status_code == 400
