"""One rule for user ids (agentd.events.USER_ID_PATTERN) at every intake and every people route.

Before it, the webhook took any 1-128 characters as `user_id` (spaces, tabs, a
lone space) while the people routes took none of those: a person the daemon
had kept could not be exported or erased while it ran. Now every id an intake
takes, the people routes take, and what they refuse no intake takes.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from agentd.daemon.host import AgentHost
from agentd.events import InboundEvent
from tests.support import serving

PER_USER = "memory: {scope: thread, persistent: true, persistent_scope: user}\nchannels: {webhook: {}}\n"
NOT_IDS = [" ", "a b", "a\tb", "ana ", "a\u3000b", "a\x00b", "a/b", "ana\n", "x" * 129]
IDS = ["ana", "ana-✓", "小明", "ana🙂", "slack:U1", "a%b", "x" * 128]


async def message(
    client: httpx.AsyncClient, user_id: str, text: str = "remember city: Porto"
) -> httpx.Response:
    body = {"conversation_id": "c", "text": text, "user_id": user_id}
    return await client.post("/agents/keeper/messages", json=body)


@pytest.mark.parametrize("user_id", NOT_IDS, ids=repr)
async def test_what_the_people_routes_refuse_no_intake_takes(tmp_path: Path, user_id: str) -> None:
    async with serving(tmp_path, {"keeper": PER_USER}) as (daemon, client):
        webhook = await message(client, user_id)
        assert webhook.status_code == 422 and "not a user id" in webhook.text, webhook.text  # was 200
        openai = await client.post(
            "/v1/chat/completions",
            json={"model": "keeper", "user": user_id, "messages": [{"role": "user", "content": "hi"}]},
        )
        assert openai.status_code == 400, openai.text
        assert (await client.get(f"/people/{quote(user_id, safe='')}/export")).status_code in (400, 404)
        entry = daemon.fleet.entries["keeper"]
        event = InboundEvent("keeper", "discord:dm:1", "remember city: Porto", "discord", user_id=user_id)
        reply = await AgentHost(entry, daemon.spawn).dispatch(event)  # a channel's event
        assert reply.error == "bad_user_id"
        assert (await client.get("/agents/keeper/conversations")).json()["conversations"] == []


@pytest.mark.parametrize("user_id", IDS, ids=repr)
async def test_every_id_an_intake_takes_can_be_exported_and_erased_while_the_daemon_runs(
    tmp_path: Path, user_id: str
) -> None:
    async with serving(tmp_path, {"keeper": PER_USER}) as (_daemon, client):
        assert (await message(client, user_id)).status_code == 200
        path = f"/people/{quote(user_id, safe='')}"
        exported = await client.get(f"{path}/export")
        assert exported.status_code == 200, exported.text
        assert exported.json()["agents"]["keeper"]["memories"][0]["value"] == "Porto"
        erased = await client.delete(path)
        assert erased.status_code == 200, erased.text
        assert erased.json()["erased"]["keeper"]["memories"] == 1
        episodes = await client.delete(f"/agents/keeper{path}/episodes")
        assert episodes.status_code == 200, episodes.text


async def test_the_published_pattern_is_the_rule(tmp_path: Path) -> None:
    async with serving(tmp_path, {"keeper": PER_USER}) as (_daemon, client):
        doc = (await client.get("/openapi.json")).json()
    body = doc["paths"]["/agents/{agent}/messages"]["post"]["requestBody"]["content"]["application/json"]
    webhook = body["schema"]["properties"]["user_id"]
    [people] = [
        p for p in doc["paths"]["/people/{user_id}"]["delete"]["parameters"] if p["name"] == "user_id"
    ]
    assert webhook["pattern"] == people["schema"]["pattern"]
