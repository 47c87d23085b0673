"""Two daemons on one PostgreSQL: a code given by one is redeemed on the other, and the first daemon —
which had already resolved the Telegram account as nobody's — treats it as Ana from its next message
(its cache of links follows the store's people version); an unlink on the other holds there too."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentd.engine.linking import AccountTaken
from agentd.store.queries import AuditEvents
from tests.test_person_data import MemoryEcho, daemon_on
from tests.test_person_links import TG, link_code, on_slack, on_telegram, say, write_folder


async def test_a_link_made_on_one_daemon_holds_on_the_other_at_the_next_message(
    tmp_path: Path, postgres_url: str
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    for root in (first, second):
        write_folder(root, postgres_url)  # one agent, one database, two data folders: two daemons
    model_a, model_b = MemoryEcho(), MemoryEcho()
    async with daemon_on(first, model_a) as (a, _), daemon_on(second, model_b) as (b, _):
        await say(a, on_slack("remember seat: ANA-SECRET-1 window"))
        await say(a, on_telegram("hello"))
        assert "- seat" not in model_a.requests[-1].system  # telegram:42 is nobody's yet, and a knows it
        assert await a.people.of(f"telegram:{TG}") is None

        code = await link_code(a)  # given on a ...
        assert "Linked" in await say(b, on_telegram(f"/link {code}"))  # ... redeemed on b

        await say(a, on_telegram("what do you know"))
        assert "- seat" in model_a.requests[-1].system  # a's next message: told on Slack, known on Telegram
        whoami = await say(a, on_telegram("/whoami"))
        assert "slack:U012AB" in whoami

        assert "Unlinked" in await say(b, on_telegram("/unlink"))
        await say(a, on_telegram("and now"))
        assert "- seat" not in model_a.requests[-1].system
        assert "linked to no other account" in await say(a, on_telegram("/whoami"))


async def test_two_daemons_linking_one_account_at_once_cannot_both_have_it(
    tmp_path: Path, postgres_url: str
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    for root in (first, second):
        write_folder(root, postgres_url)
    async with daemon_on(first, MemoryEcho()) as (a, _), daemon_on(second, MemoryEcho()) as (b, _):
        # both operators' daemons found telegram:42 free; b's link commits first
        assert await a.people.of(f"telegram:{TG}") is None and await b.people.of(f"telegram:{TG}") is None
        await b.people.add_account("bob", f"telegram:{TG}", "http", "http:10.0.0.2")
        with pytest.raises(AccountTaken, match=f"telegram:{TG} is linked to bob already"):
            await a.people.link("ana", [f"telegram:{TG}"], "http", "http:10.0.0.1", keep_others=True)
        linked = await a.people.of(f"telegram:{TG}")
        assert linked is not None and linked.person == "bob"
        assert a.daemon_store is not None
        links = [
            e["data"] for e in await a.daemon_store.read(AuditEvents(kind="person")) if e["action"] == "link"
        ]
        assert [(d["person"], d["by"]) for d in links] == [("bob", "http:10.0.0.2")]  # a's wrote nothing
