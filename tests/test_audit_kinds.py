"""Reading the audit trail by kind and by agent name: a kind that does not exist is a 400 naming the
kinds (not an empty 200 that reads as "nothing happened"), and an agent named like one of the
`agentd audit` subcommands still has its trail shown (`agentd audit show NAME`)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from agentd.cli import main
from tests.support import send, serving

AGENT = "memory: {scope: thread, persistent: true}\nchannels: {webhook: {}}\n"


async def test_an_unknown_kind_is_a_400_naming_the_kinds(tmp_path: Path) -> None:
    async with serving(tmp_path, {"assistant": AGENT}) as (_daemon, client):
        bogus = await client.get("/audit", params={"kind": "bogus"})
        assert bogus.status_code == 400, bogus.text
        assert "'bogus'" in bogus.json()["error"] and "config, conversation" in bogus.json()["error"]
        for kind in ("config", "", "person", "tool", "conversation"):
            assert (await client.get("/audit", params={"kind": kind})).status_code == 200, kind


async def test_every_kind_written_is_a_known_kind(tmp_path: Path) -> None:
    async with serving(tmp_path, {"assistant": AGENT}) as (_daemon, client):
        await send(client, "assistant", "c", "remember city: Lisbon")
        await send(client, "assistant", "c", "/status")
        await client.delete("/agents/assistant/conversations/webhook:c")
        events = (await client.get("/audit", params={"limit": 1000})).json()["events"]
    assert (
        {"config", "memory", "command", "conversation"} <= {e["kind"] for e in events} <= set(known_kinds())
    )


async def trails_of(root: Path) -> None:
    async with serving(root, {"verify": AGENT, "export": AGENT, "show": AGENT}) as (_daemon, client):
        for name in ("verify", "export", "show"):
            await send(client, name, "c", f"remember who: {name}")


@pytest.mark.parametrize("name", ["verify", "export", "show"])
def test_agents_named_like_a_subcommand_have_their_trail_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    asyncio.run(trails_of(tmp_path))
    folders = ["--agents", str(tmp_path / "agents"), "--data", str(tmp_path / "data"), "--json"]
    assert main(["audit", "show", name, *folders]) == 0
    events = json.loads(capsys.readouterr().out)
    assert ("memory", "remember") in [(e["kind"], e["action"]) for e in events]
    assert {e["agent"] for e in events} == {name}
    # the subcommands keep working, on that agent too
    assert main(["audit", "verify", name, *folders]) == 0
    verdicts = json.loads(capsys.readouterr().out)
    assert [v["chain"] for v in verdicts] == [name]


def known_kinds() -> tuple[str, ...]:
    from agentd.store.records import AUDIT_KINDS

    return AUDIT_KINDS
