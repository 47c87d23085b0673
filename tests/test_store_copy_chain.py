"""`agentd store copy` carries the audit hash chain: on real agent files and a throwaway PostgreSQL server,
`agentd audit verify` passes on the database after a copy (and the offline verifier on an export from
it), a tampered file is refused at the broken event, an agent that started in the database first gets
the file's events re-linked after its own, copying again keeps the chain, and a person erased before or
after the copy leaves every chain verifying."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentd.cli import main
from agentd.providers.embedders import HashEmbedder
from agentd.store.postgres.connection import connect
from tests.support import Harness, say
from tests.test_store_copy_rules import REMEMBERS, copied, sql

VERIFIER = Path(__file__).parent.parent / "docs" / "verify_audit.py"
Link = tuple[int, bytes, bytes]  # an event's seq, prev_hash, hash


@pytest.fixture
def data(tmp_path: Path) -> Path:
    (tmp_path / "agents").mkdir()
    return tmp_path / "data"


def talk(data: Path, name: str, lines: list[tuple[str, str, str]], *, url: str | None = None) -> None:
    """Agent `name` hears each (conversation, person, text), on the SQLite files in `data` (or in the
    database at `url`)."""

    async def go() -> None:
        harness = Harness(data, store_url=url)
        try:
            agent = await harness.agent(REMEMBERS, name, embedder=HashEmbedder(64))
            for key, user, text in lines:
                await say(agent, f"webhook:{key}", user)(text)
                assert await agent.drain(5)
        finally:
            await harness.close()

    asyncio.run(go())


def on_database(tmp_path: Path, url: str, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """An agentd command run against the database (agentd.yaml's store.url): its exit code and stdout."""
    root = tmp_path / "on-database"
    (root / "agents").mkdir(parents=True, exist_ok=True)
    (root / "agentd.yaml").write_text(f"store: {{url: '{url}'}}\n")
    capsys.readouterr()
    code = main([*argv, "--agents", str(root / "agents"), "--data", str(root / "data")])
    return code, capsys.readouterr().out


def on_files(data: Path, *argv: str) -> int:
    return main([*argv, "--agents", str(data.parent / "agents"), "--data", str(data)])


def file_chain(data: Path, name: str) -> list[Link]:
    with sqlite3.connect(data / f"{name}.sqlite") as conn:
        return conn.execute("SELECT seq, prev_hash, hash FROM audit ORDER BY seq").fetchall()


def database_chain(url: str, name: str) -> list[Link]:
    with connect(url) as conn:
        found = conn.execute(
            "SELECT a.seq, a.prev_hash, a.hash FROM agentd.audit a JOIN agentd.agents g ON g.id = a.agent_id"
            " WHERE g.name = %s ORDER BY a.seq",
            (name,),
        )
        return [(seq, bytes(prev), bytes(digest)) for seq, prev, digest in found]


def verified(tmp_path: Path, url: str, capsys: pytest.CaptureFixture[str]) -> str:
    """`agentd audit verify` on the database passes; what it printed."""
    code, out = on_database(tmp_path, url, capsys, "audit", "verify")
    assert code == 0, out
    return out


def test_after_a_copy_audit_verify_passes_on_the_database_with_the_files_chain_byte_for_byte(
    data: Path, tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    talk(
        data,
        "bot",
        [("c1", "ana", "remember city: Lisbon"), ("c1", "ana", "/reset"), ("c1", "ana", "remember pet: cat")],
    )
    talk(data, "other", [("c1", "bob", "remember colour: green")])
    before = {name: file_chain(data, name) for name in ("bot", "other")}
    assert len(before["bot"]) >= 3

    code, out, _ = copied(data, postgres_url, capsys)
    assert code == 0, out
    for name, chain in before.items():
        assert database_chain(postgres_url, name) == chain  # seq, prev_hash and hash as in the file
        last, head = chain[-1][0], chain[-1][2].hex()
        assert f"{name}: audit events 1..{last} chained as in the file; head {last} {head}" in out
        assert f"{name}: ok, {last} events; head {last} {head}" in verified(tmp_path, postgres_url, capsys)
    # /reset's event names the file's thread, as written (its data is covered by its hash)
    with connect(postgres_url) as conn:
        [reset] = conn.execute("SELECT data FROM agentd.audit WHERE action = 'reset'").fetchall()
    with sqlite3.connect(data / "bot.sqlite") as file:
        assert reset == file.execute("SELECT data FROM audit WHERE action = 'reset'").fetchone()

    # an export from the database verifies offline, as an auditor would run it
    export = tmp_path / "trail.jsonl"
    code, _ = on_database(tmp_path, postgres_url, capsys, "audit", "export", "-o", str(export))
    assert code == 0
    offline = subprocess.run(
        [sys.executable, "-I", str(VERIFIER), str(export)], capture_output=True, text=True, check=False
    )
    assert offline.returncode == 0, offline.stderr
    assert (
        f"bot: verified up to event {before['bot'][-1][0]}, head {before['bot'][-1][2].hex()}"
        in offline.stdout
    )


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        (
            "UPDATE audit SET action = 'forged' WHERE seq = 2",
            "event 2: event 2's content does not match its hash",
        ),
        ("DELETE FROM audit WHERE seq = 2", "event 2: event 2 is missing (the next stored is 3)"),
        (
            "UPDATE audit_chain SET seq = seq + 1",
            "event {n}: the chain head records {n} events; the trail ends",
        ),
    ],
)
def test_a_tampered_audit_trail_refuses_the_agent_at_that_event_and_the_others_are_copied(
    data: Path, postgres_url: str, capsys: pytest.CaptureFixture[str], tamper: str, reason: str
) -> None:
    talk(data, "bot", [("c1", "ana", "remember city: Lisbon"), ("c1", "ana", "remember pet: cat")])
    talk(data, "other", [("c1", "bob", "hi")])
    events = len(file_chain(data, "bot"))
    sql(data / "bot.sqlite", tamper)
    code, out, _ = copied(data, postgres_url, capsys)
    assert code == 1
    expected = reason.format(n=events + 1)
    assert f"bot: refused, nothing of it copied: its audit trail does not verify: {expected}" in out
    assert "other: copied " in out
    with connect(postgres_url) as conn:
        assert conn.execute("SELECT name FROM agentd.agents ORDER BY name").fetchall() == [("other",)]


def test_an_agent_that_started_in_the_database_gets_the_files_events_re_linked_after_its_own(
    data: Path, tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    talk(tmp_path / "elsewhere", "bot", [("c2", "bob", "remember town: Porto")], url=postgres_url)
    there = database_chain(postgres_url, "bot")
    talk(data, "bot", [("c1", "ana", "remember city: Lisbon"), ("c1", "ana", "remember pet: cat")])
    own = file_chain(data, "bot")

    code, out, _ = copied(data, postgres_url, capsys)
    assert code == 0, out
    chain = database_chain(postgres_url, "bot")
    assert chain[: len(there)] == there and len(chain) == len(there) + len(own)
    assert [seq for seq, _, _ in chain] == list(range(1, len(chain) + 1))
    assert chain[len(there)][1] == there[-1][2]  # the file's first event links to the database's head
    # the file's own head is printed beside the database's, so an auditor can tie the two
    head = chain[-1]
    assert (
        f"bot: audit events 1..{len(own)} of the file (its head: {len(own)} {own[-1][2].hex()}) follow the "
        f"database's event {len(there)}, re-linked as events {len(there) + 1}..{head[0]}; head {head[0]} "
        f"{head[2].hex()}"
    ) in out
    assert f"bot: ok, {head[0]} events; head {head[0]} {head[2].hex()}" in verified(
        tmp_path, postgres_url, capsys
    )

    # a daemon on the database appends after them
    talk(tmp_path / "elsewhere", "bot", [("c2", "bob", "remember pet: dog")], url=postgres_url)
    verified(tmp_path, postgres_url, capsys)


def test_copying_again_keeps_the_chain_and_the_files_new_events_continue_it(
    data: Path, tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    talk(data, "bot", [("c1", "ana", "remember city: Lisbon")])
    assert copied(data, postgres_url, capsys)[0] == 0
    code, out, _ = copied(data, postgres_url, capsys)  # nothing new
    assert code == 0 and "bot: nothing new: " in out and "audit events" not in out
    verified(tmp_path, postgres_url, capsys)

    # the file goes on in a new conversation (its daemon ran after the copy; a conversation copied
    # and gone on with would refuse the agent): its new events continue the chain as they are
    copied_before = len(file_chain(data, "bot"))
    talk(data, "bot", [("c3", "ana", "remember pet: cat")])
    code, out, _ = copied(data, postgres_url, capsys)
    assert code == 0, out
    assert database_chain(postgres_url, "bot") == file_chain(data, "bot")
    last = len(file_chain(data, "bot"))
    assert f"bot: audit events {copied_before + 1}..{last} chained as in the file" in out
    verified(tmp_path, postgres_url, capsys)

    # both went on: the file's new events follow what daemons on the database audited since
    talk(tmp_path / "elsewhere", "bot", [("c2", "bob", "remember colour: red")], url=postgres_url)
    talk(data, "bot", [("c4", "ana", "remember tea: green")])
    code, out, _ = copied(data, postgres_url, capsys)
    assert code == 0, out
    assert "re-linked as events" in out
    database, file = database_chain(postgres_url, "bot"), file_chain(data, "bot")
    assert database[:last] == file[:last] and len(database) > len(file)
    verified(tmp_path, postgres_url, capsys)


def test_a_person_erased_in_the_file_before_copying_copies_and_verifies(
    data: Path, tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    talk(data, "bot", [("c1", "ana", "remember city: Lisbon"), ("c2", "bob", "remember pet: cat")])
    assert on_files(data, "person", "erase", "ana") == 0
    with sqlite3.connect(data / "bot.sqlite") as conn:
        erased = conn.execute(
            "SELECT seq, erased FROM audit WHERE erased IS NOT NULL ORDER BY seq"
        ).fetchall()
    assert erased  # (the events naming ana keep only their commitments)
    code, out, _ = copied(data, postgres_url, capsys)
    assert code == 0, out
    with connect(postgres_url) as conn:
        assert (
            conn.execute(
                "SELECT seq, erased FROM agentd.audit WHERE erased IS NOT NULL ORDER BY seq"
            ).fetchall()
            == erased
        )
    assert database_chain(postgres_url, "bot") == file_chain(data, "bot")
    verified(tmp_path, postgres_url, capsys)


def test_a_persons_data_on_a_copied_agent_is_exported_and_erased(
    data: Path, tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    talk(data, "bot", [("c1", "ana", "my secret word is pineapple"), ("c2", "bob", "hello there")])
    assert copied(data, postgres_url, capsys)[0] == 0

    code, out = on_database(tmp_path, postgres_url, capsys, "person", "export", "ana")
    assert code == 0
    document: dict[str, Any] = json.loads(out)
    assert list(document["agents"]) == ["bot"] and "pineapple" in json.dumps(document["agents"]["bot"])

    code, out = on_database(tmp_path, postgres_url, capsys, "person", "erase", "ana")
    assert code == 0 and out.startswith("bot: ")
    with connect(postgres_url) as conn:
        left = conn.execute(
            "SELECT count(*) FROM agentd.messages WHERE user_id = 'ana' OR body LIKE '%pineapple%'"
        ).fetchone()
        kept = conn.execute("SELECT count(*) FROM agentd.messages WHERE user_id = 'bob'").fetchone()
    assert left == (0,) and kept == (1,)
    verified(tmp_path, postgres_url, capsys)

    # copying again brings nothing of them back: what the erasure changed or deleted stays so
    code, out, _ = copied(data, postgres_url, capsys)
    assert code == 0 and "bot: nothing new: " in out, out
    with connect(postgres_url) as conn:
        assert conn.execute("SELECT count(*) FROM agentd.messages WHERE user_id = 'ana'").fetchone() == (0,)
    verified(tmp_path, postgres_url, capsys)
