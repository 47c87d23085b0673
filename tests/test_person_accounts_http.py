"""The operator links a person's accounts over HTTP (`GET /people/{user_id}`, `POST
/people/{person}/accounts`, `DELETE /people/{person}/accounts/{account}`), served by uvicorn as `agentd
run` serves it: behind the token, each refusal a 4xx with its reason, each link and unlink stored and
audited in the daemon's trail with who asked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from agentd.daemon import Daemon
from agentd.engine.linking import AccountTaken
from agentd.events import InboundEvent
from agentd.store.link_queries import PersonAccounts
from agentd.store.queries import AuditEvents
from tests.support import daemon_on_loopback

TOKEN = "s3cret"
AGENT = "memory: {scope: thread, persistent: true, persistent_scope: user}\nchannels: {webhook: {}}\n"


async def person_trail(daemon: Daemon) -> list[tuple[str, dict[str, Any]]]:
    assert daemon.daemon_store is not None
    return [(e["action"], e["data"]) for e in await daemon.daemon_store.read(AuditEvents(kind="person"))]


async def stored(daemon: Daemon, person: str) -> list[str] | None:
    assert daemon.daemon_store is not None
    linked = await daemon.daemon_store.read(PersonAccounts(person))
    return None if linked is None else list(linked.accounts)


async def test_the_operator_links_shows_and_unlinks_accounts_over_http(tmp_path: Path) -> None:
    async with daemon_on_loopback(tmp_path, {"helper": AGENT}, f"http: {{token: {TOKEN}}}\n") as (
        daemon,
        url,
    ):
        async with httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, trust_env=False
        ) as api:
            for account in ("slack:U012AB", "telegram:42", "discord:7"):
                r = await api.post("/people/ana/accounts", json={"account": account})
                assert r.status_code == 200, r.text
                assert r.json()["linked"] is True and account in r.json()["accounts"]
            again = await api.post("/people/ana/accounts", json={"account": "telegram:42"})
            assert again.status_code == 200 and again.json()["linked"] is False
            assert await stored(daemon, "ana") == ["discord:7", "slack:U012AB", "telegram:42"]

            # found by name, by account, by bare user id; an event from any account is Ana's
            for name in ("ana", "telegram%3A42", "U012AB"):
                r = await api.get(f"/people/{name}")
                assert r.status_code == 200, r.text
                assert r.json() == {"person": "ana", "accounts": ["discord:7", "slack:U012AB", "telegram:42"]}
            event = InboundEvent("helper", "telegram:42", "hi", "telegram", user_id="42")
            assert (await daemon.people.resolve(event)).person == "ana"

            r = await api.delete("/people/ana/accounts/telegram%3A42")
            assert r.status_code == 200, r.text
            assert r.json() == {"person": "ana", "accounts": ["discord:7", "slack:U012AB"]}
            assert await stored(daemon, "ana") == ["discord:7", "slack:U012AB"]
            # the last but one goes: a person of one account is no person, so both are unlinked
            r = await api.delete("/people/ana/accounts/discord%3A7")
            assert r.status_code == 200 and r.json()["accounts"] == []
            assert await stored(daemon, "ana") is None
            assert (await api.get("/people/ana")).status_code == 404


async def test_each_link_and_unlink_is_audited_with_who_asked(tmp_path: Path) -> None:
    async with daemon_on_loopback(tmp_path, {"helper": AGENT}) as (daemon, url):
        async with httpx.AsyncClient(base_url=url, trust_env=False) as api:
            await api.post("/people/ana/accounts", json={"account": "slack:U012AB"})
            await api.post("/people/ana/accounts", json={"account": "slack:U012AB"})  # no change
            await api.post("/people/ana/accounts", json={"account": "telegram:42"})
            await api.delete("/people/ana/accounts/telegram:42")
        trail = await person_trail(daemon)
    assert [action for action, _ in trail] == ["link", "link", "unlink"]
    assert trail[0][1] == {
        "person": "ana",
        "accounts": ["slack:U012AB"],
        "source": "http",
        "by": "http:127.0.0.1",
    }
    assert (
        trail[2][1]["accounts"] == ["telegram:42", "slack:U012AB"] and trail[2][1]["by"] == "http:127.0.0.1"
    )


async def test_refusals_are_4xx_with_their_reason_and_change_nothing(tmp_path: Path) -> None:
    async with daemon_on_loopback(tmp_path, {"helper": AGENT}, f"http: {{token: {TOKEN}}}\n") as (
        daemon,
        url,
    ):
        async with httpx.AsyncClient(base_url=url, trust_env=False) as anyone:
            for request in (
                anyone.get("/people/ana"),
                anyone.post("/people/ana/accounts", json={"account": "slack:U1"}),
                anyone.delete("/people/ana/accounts/slack:U1"),
            ):
                r = await request
                assert r.status_code == 401, r.text
        async with httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, trust_env=False
        ) as api:
            assert (
                await api.post("/people/ana/accounts", json={"account": "telegram:42"})
            ).status_code == 200

            def refused(r: httpx.Response, status: int, reason: str) -> None:
                assert r.status_code == status, r.text
                assert reason in str(r.json()["error"]), r.json()

            taken = await api.post("/people/bob/accounts", json={"account": "telegram:42"})
            refused(taken, 409, "telegram:42 is linked to ana already")
            refused(
                await api.post("/people/bob/accounts", json={"account": "telegram"}), 400, "not an account"
            )
            refused(await api.post("/people/bob/accounts", json={"account": "tg:a b"}), 400, "not an account")
            refused(
                await api.post("/people/b%20b/accounts", json={"account": "tg:1"}), 400, "not a person's name"
            )
            refused(await api.post("/people/bob/accounts", content=b"{"), 400, "malformed JSON")
            extra = await api.post("/people/bob/accounts", json={"account": "tg:1", "as": "x"})
            assert extra.status_code == 422 and extra.json()["detail"][0]["field"] == "as"
            refused(await api.get("/people/nobody"), 404, "no person with linked accounts")
            refused(await api.get("/people/a%20b"), 400, "not a user id")
            refused(await api.delete("/people/nobody/accounts/telegram:42"), 404, "no person named 'nobody'")
            refused(await api.delete("/people/ana/accounts/slack:U9"), 404, "not one of ana's accounts")
            refused(await api.delete("/people/ana/accounts/slack"), 400, "not an account")

            paths = (await api.get("/openapi.json")).json()["paths"]
            assert "post" in paths["/people/{person}/accounts"]
            assert "delete" in paths["/people/{person}/accounts/{account}"]
            assert "get" in paths["/people/{user_id}"] and "delete" in paths["/people/{user_id}"]
        # the store decides too (in the transaction: a link made since the route looked is not moved)
        with pytest.raises(AccountTaken, match="telegram:42 is linked to ana already"):
            await daemon.people.link("bob", ["slack:UB", "telegram:42"], "http", "test", keep_others=True)
        assert await stored(daemon, "ana") == ["telegram:42"] and await stored(daemon, "bob") is None
        assert [action for action, _ in await person_trail(daemon)] == ["link"]
