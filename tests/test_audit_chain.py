"""The audit trail as a hash chain: an untouched trail verifies; an edited, deleted, inserted or swapped
event is named; the daemon's trail is a chain too; the export verifies offline with docs/verify_audit.py."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentd.cli.main import main
from agentd.daemon.audit_trail import verify_store
from agentd.engine.agent import Agent
from agentd.store.audit_chain import Verdict
from agentd.store.queries import AuditEvents, AuditHead, AuditTrail
from agentd.store.records import AuditRecord
from agentd.store.writes import AppendAudit
from tests.support import Harness, say, serving, sqlite_file

VERIFIER = Path(__file__).parent.parent / "docs" / "verify_audit.py"
PERSISTENT = "memory: {scope: thread, persistent: true}\nchannels: {webhook: {}}\n"


async def trail_of(harness: Harness, events: int = 10) -> Agent:
    """An agent whose trail holds `events` events (remember, then its tool call, and so on)."""
    agent = await harness.agent(PERSISTENT)
    speak = say(agent)
    for i in range(events // 2):
        await speak(f"remember k{i}: v{i}")
    return agent


async def verdict(agent: Agent) -> Verdict:
    return await verify_store(agent.state.store, agent.name)


async def sql(harness: Harness, agent: Agent, statement: str, *args: Any) -> None:
    """Raw SQL as someone with write access to the data would run it: on the agent's SQLite file, or in
    the database (one agent there: its rows are the only ones). `{agent_id}` is where PostgreSQL's rows
    name their agent (empty on SQLite)."""
    if harness.store_url is None:
        with sqlite_file(harness.file_of(agent)) as conn:
            conn.execute(statement.replace("{agent_id}", ""), args)
        return
    url = harness.store_url

    def run() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SET search_path TO agentd")
            conn.execute(statement.replace("{agent_id}", "agent_id, ").replace("?", "%s"), args)  # type: ignore[arg-type]

    await asyncio.to_thread(run)


@pytest.mark.both_stores
async def test_an_untouched_trail_verifies_to_its_head(harness: Harness) -> None:
    agent = await trail_of(harness, 10)
    result = await verdict(agent)
    assert result.ok and result.events == 10 and result.first == 1
    head = await agent.state.store.read(AuditHead())
    assert result.last == head and head is not None and head[0] == 10 and len(head[1]) == 64


@pytest.mark.both_stores
async def test_each_event_links_to_the_one_before(harness: Harness) -> None:
    agent = await trail_of(harness, 6)
    events = await agent.state.store.read(AuditEvents(limit=10))
    assert [e["seq"] for e in events] == [1, 2, 3, 4, 5, 6]
    assert events[0]["prev_hash"] == "0" * 64
    assert all(later["prev_hash"] == earlier["hash"] for earlier, later in itertools.pairwise(events))


@pytest.mark.both_stores
async def test_an_edited_event_is_named(harness: Harness) -> None:
    agent = await trail_of(harness)
    await sql(harness, agent, 'UPDATE audit SET data = \'{"key":"k9"}\' WHERE seq = 5')
    result = await verdict(agent)
    assert (result.broken, result.reason) == (5, "event 5's content does not match its hash (it was changed)")


@pytest.mark.both_stores
@pytest.mark.parametrize(
    "column, value",
    [
        ("kind", "'config'"),
        ("action", "'forget'"),
        ("ts", "ts + 1"),
        ("agent", "'other'"),
        ("run_id", "'r-forged'"),
        ("daemon", "'elsewhere'"),
        ("conversation_key", "'webhook:other'"),
        ("salts", "'{}'"),
        ("erased", '\'{"data.key":"00"}\''),
        ("hash", "?"),
    ],
)
async def test_every_column_is_covered(harness: Harness, column: str, value: str) -> None:
    agent = await trail_of(harness, 6)
    args = (bytes(32),) if value == "?" else ()
    await sql(harness, agent, f"UPDATE audit SET {column} = {value} WHERE seq = 3", *args)
    assert (await verdict(agent)).broken == 3


@pytest.mark.both_stores
async def test_a_deleted_event_is_named(harness: Harness) -> None:
    agent = await trail_of(harness)
    await sql(harness, agent, "DELETE FROM audit WHERE seq = 4")
    result = await verdict(agent)
    assert (result.broken, result.reason) == (4, "event 4 is missing (the next stored is 5)")


async def copy_event(
    harness: Harness,
    agent: Agent,
    source: int,
    seq: int,
    *,
    kind: str = "kind",
    action: str = "action",
    digest: str,
    args: tuple[Any, ...] = (),
) -> None:
    """Insert a copy of event `source` as event `seq` (SQL expressions for its kind, action and hash),
    linked after the source (its prev_hash is the source's hash)."""
    await sql(
        harness,
        agent,
        "INSERT INTO audit ({agent_id}ts, agent, kind, action, conversation_key, run_id, data, daemon, seq,"
        f" salts, erased, prev_hash, hash) SELECT {{agent_id}}ts, agent, {kind}, {action}, conversation_key,"
        f" run_id, data, daemon, {seq}, salts, erased, hash, {digest} FROM audit WHERE seq = {source}",
        *args,
    )


@pytest.mark.both_stores
async def test_a_forged_event_inserted_mid_trail_is_named(harness: Harness) -> None:
    agent = await trail_of(harness)
    # make room at 6 and copy event 5 there with other data: its stored hash cannot match
    await sql(harness, agent, "UPDATE audit SET seq = -seq - 1 WHERE seq >= 6")
    await sql(harness, agent, "UPDATE audit SET seq = -seq WHERE seq < 0")
    await copy_event(harness, agent, 5, 6, action="'forget'", digest="hash")
    result = await verdict(agent)
    assert result.broken == 6


@pytest.mark.both_stores
async def test_an_event_appended_outside_agentd_is_named_even_with_a_correct_link(harness: Harness) -> None:
    agent = await trail_of(harness, 4)
    store = agent.state.store
    [last] = await store.read(AuditTrail(3, 10))
    forged = {**last, "seq": 5, "kind": "config", "prev_hash": last["hash"]}
    # a forger who recomputes the hash: the link is right, but the chain head still says 4
    from agentd.store.audit_chain import digest_of, link

    digest = link(bytes.fromhex(last["hash"]), 5, digest_of(forged))
    await copy_event(harness, agent, 4, 5, kind="'config'", digest="?", args=(digest,))
    result = await verdict(agent)
    assert (result.broken, result.reason) == (
        5,
        "event 5 is past the chain head (4): it was added outside agentd",
    )


@pytest.mark.both_stores
async def test_two_swapped_events_are_named_at_the_first(harness: Harness) -> None:
    agent = await trail_of(harness)
    await sql(harness, agent, "UPDATE audit SET seq = -1 WHERE seq = 3")
    await sql(harness, agent, "UPDATE audit SET seq = 3 WHERE seq = 7")
    await sql(harness, agent, "UPDATE audit SET seq = 7 WHERE seq = -1")
    assert (await verdict(agent)).broken == 3


@pytest.mark.both_stores
async def test_a_trail_cut_short_is_found_against_its_head(harness: Harness) -> None:
    agent = await trail_of(harness)
    await sql(harness, agent, "DELETE FROM audit WHERE seq > 8")
    result = await verdict(agent)
    assert (result.broken, result.reason) == (9, "the chain head records 10 events; the trail ends at 8")


@pytest.mark.both_stores
async def test_a_cut_that_also_rewrites_the_head_needs_a_head_kept_elsewhere(harness: Harness) -> None:
    """The limit, written down: whoever can write the file can cut the tail and move the head back.
    The chain then verifies, to a head other than the one an operator kept from an earlier verify."""
    agent = await trail_of(harness)
    kept = (await verdict(agent)).last
    await sql(harness, agent, "DELETE FROM audit WHERE seq > 8")
    chain_table = "audit_chain" if harness.store_url is None else "audit_chains"
    await sql(
        harness, agent, f"UPDATE {chain_table} SET seq = 8, head = (SELECT hash FROM audit WHERE seq = 8)"
    )
    result = await verdict(agent)
    assert result.ok and result.last != kept and kept is not None and kept[0] == 10


@pytest.mark.both_stores
async def test_events_appended_in_one_batch_and_by_other_writes_share_the_chain(harness: Harness) -> None:
    agent = await trail_of(harness, 2)
    records = [AuditRecord("command", "status", "webhook:c1", None, {"n": i}) for i in range(3)]
    await agent.state.store.write(AppendAudit(agent.name, records, 100))  # an int time: stored as a float
    await agent.delete_conversation("webhook:c1", by="test")  # its audit row is written by the store
    result = await verdict(agent)
    assert result.ok and result.events == 6


async def test_the_daemons_own_trail_is_a_chain_and_get_audit_links_events(tmp_path: Path) -> None:
    async with serving(tmp_path, {"bot": PERSISTENT}) as (daemon, client):
        for i in range(3):
            await client.post(
                "/agents/bot/messages", json={"conversation_id": "c", "text": f"remember a{i}: b"}
            )
        events = (await client.get("/audit", params={"limit": 1000})).json()["events"]
        by_chain: dict[str, list[dict[str, Any]]] = {}
        for event in events:
            by_chain.setdefault(event["chain"], []).append(event)
        assert set(by_chain) == {"_daemon", "bot"}
        for chain in by_chain.values():
            chain.sort(key=lambda e: e["seq"])
            assert chain[0]["seq"] == 1 and chain[0]["prev_hash"] == "0" * 64
            assert all(b["prev_hash"] == a["hash"] for a, b in itertools.pairwise(chain))
        assert daemon.daemon_store is not None
        assert (await verify_store(daemon.daemon_store, "_daemon")).ok


async def test_events_written_before_the_chain_are_sealed_by_the_migration(tmp_path: Path) -> None:
    import sqlite3

    from agentd.store.sqlite.migrations import MIGRATIONS, migrate

    path = tmp_path / "data" / "bot.sqlite"
    path.parent.mkdir()
    conn = sqlite3.connect(path, isolation_level=None)
    migrate(conn, MIGRATIONS[:5])  # the schema before the chain
    conn.executemany(
        "INSERT INTO audit (ts, agent, kind, action, conversation_key, data) VALUES (?, 'bot', 'memory', ?, ?, ?)",
        [(1000 + i, f"a{i}", "webhook:x" if i % 2 else None, json.dumps({"key": f"k{i}"})) for i in range(5)],
    )
    assert migrate(conn)[0] == "0006_audit_chain"  # (and the migrations after it)
    conn.close()
    harness = Harness(tmp_path / "data")
    try:
        agent = await harness.agent(PERSISTENT)
        await say(agent)("remember later: yes")
        result = await verdict(agent)
        assert result.ok and result.events == 7
        trail = await agent.state.store.read(AuditTrail())
        assert [e["action"] for e in trail[:5]] == ["a0", "a1", "a2", "a3", "a4"]
    finally:
        await harness.close()


# -- the CLI and the offline verifier -----------------------------------------------------------


async def cli(root: Path, *argv: str) -> int:
    """The command as a person runs it (in a thread: it runs its own event loop)."""
    return await asyncio.to_thread(
        main, [*argv, "--agents", str(root / "agents"), "--data", str(root / "data")]
    )


async def verify_offline(export: Path) -> subprocess.CompletedProcess[str]:
    """docs/verify_audit.py run on an export, as an auditor would (python3, nothing of agentd imported)."""
    command = [sys.executable, "-I", str(VERIFIER), str(export)]
    return await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True)


async def folder_with_trail(tmp_path: Path) -> Path:
    (tmp_path / "agents").mkdir()
    harness = Harness(tmp_path / "data")
    try:
        await trail_of(harness, 6)
        other = await harness.agent(PERSISTENT, name="other")
        await say(other)("remember x: y")
    finally:
        await harness.close()
    return tmp_path


async def test_audit_verify_prints_each_chains_head_and_names_a_break(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = await folder_with_trail(tmp_path)
    assert await cli(root, "audit", "verify") == 0
    out = capsys.readouterr().out
    assert "bot: ok, 6 events; head 6 " in out and "other: ok, 2 events; head 2 " in out
    assert "Keep these heads" in out
    import sqlite3

    with sqlite3.connect(root / "data" / "bot.sqlite") as conn:
        conn.execute("UPDATE audit SET action = 'x' WHERE seq = 2")
    assert await cli(root, "audit", "verify", "bot") == 1
    out = capsys.readouterr().out
    assert out.strip() == "bot: BROKEN at event 2: event 2's content does not match its hash (it was changed)"
    assert await cli(root, "audit", "verify", "other", "--json") == 0
    [report] = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["head"]["seq"] == 2


async def test_an_export_verifies_offline_and_an_edit_of_it_does_not(tmp_path: Path) -> None:
    root = await folder_with_trail(tmp_path)
    export = root / "trail.jsonl"
    assert await cli(root, "audit", "export", "-o", str(export)) == 0
    assert export.stat().st_mode & 0o077 == 0
    ok = await verify_offline(export)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.splitlines()[0].startswith("bot: verified up to event 6, head ")
    lines = export.read_text().splitlines()
    event = json.loads(lines[2])
    event["data"]["key"] = "k-forged"
    lines[2] = json.dumps(event)
    export.write_text("\n".join(lines) + "\n")
    bad = await verify_offline(export)
    assert bad.returncode == 1 and bad.stderr.strip() == "line 3: chain bot is broken at event 3"


async def test_an_export_since_a_time_starts_mid_chain_and_still_verifies(tmp_path: Path) -> None:
    root = await folder_with_trail(tmp_path)
    export = root / "since.jsonl"
    harness = Harness(root / "data")
    try:
        agent = await harness.agent(PERSISTENT)
        [third] = [e for e in await agent.state.store.read(AuditTrail()) if e["seq"] == 3]
    finally:
        await harness.close()
    assert (
        await cli(root, "audit", "export", "--agent", "bot", "--since", str(third["ts"]), "-o", str(export))
        == 0
    )
    seqs = [json.loads(line)["seq"] for line in export.read_text().splitlines()]
    assert seqs == [3, 4, 5, 6]
    ok = await verify_offline(export)
    assert ok.returncode == 0 and ok.stdout.startswith("bot: verified up to event 6")


# -- PostgreSQL: sealed at the migration, several daemons on one chain -----------------------------


async def test_events_in_a_database_from_before_the_chain_are_sealed_by_the_migration(
    tmp_path: Path, postgres_url: str
) -> None:
    from agentd.store.postgres.connection import connect
    from agentd.store.postgres.migrations import MIGRATIONS, migrate

    def old_database() -> None:
        with connect(postgres_url) as conn:
            migrate(conn, MIGRATIONS[:3])  # the schema before the chain
            for agent in ("bot", "other"):
                [(agent_id,)] = conn.execute(
                    "INSERT INTO agents (name, created_at) VALUES (%s, 0) RETURNING id", (agent,)
                ).fetchall()
                for i in range(4):
                    conn.execute(
                        "INSERT INTO audit (agent_id, ts, agent, kind, action, conversation_key, data)"
                        " VALUES (%s, %s, %s, 'memory', %s, 'webhook:x', %s)",
                        (agent_id, 1000 + i, agent, f"a{i}", json.dumps({"key": f"k{i}"})),
                    )

    await asyncio.to_thread(old_database)
    harness = Harness(tmp_path / "data", store_url=postgres_url)
    try:
        agent = await harness.agent(PERSISTENT)  # opening the database migrates it
        await say(agent)("remember later: yes")
        result = await verdict(agent)
        assert result.ok and result.events == 6
        assert [e["action"] for e in await agent.state.store.read(AuditTrail())][:4] == [
            "a0",
            "a1",
            "a2",
            "a3",
        ]
        other = await harness.agent(PERSISTENT, name="other")
        assert (await verify_store(other.state.store, "other")).events == 4
    finally:
        await harness.close()


async def test_several_daemons_appending_to_one_agents_chain_take_turns(
    tmp_path: Path, postgres_url: str
) -> None:
    """Two daemons serving one agent write its trail at once: each append waits for the chain's head,
    so the events are numbered without a gap or a repeat and the chain verifies."""
    harness = Harness(tmp_path / "data", store_url=postgres_url)
    try:
        one, two = await harness.agent(PERSISTENT), await harness.agent(PERSISTENT)

        async def burst(agent: Agent, n: int) -> None:
            for i in range(20):
                await agent.state.store.write(
                    AppendAudit(
                        agent.name,
                        [AuditRecord("command", "status", f"webhook:{n}", None, {"i": i})] * 2,
                        1.5,
                    )
                )

        await asyncio.gather(
            burst(one, 1), burst(two, 2), say(one)("remember a: b"), say(two, "webhook:c2")("remember c: d")
        )
        result = await verdict(one)
        assert result.ok and result.events == 84
        daemons = {e["daemon"] for e in await one.state.store.read(AuditTrail())}
        assert len(daemons) == 2  # both daemons' events, in one chain
    finally:
        await harness.close()


async def test_audit_verify_on_a_database(
    tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "agents").mkdir()
    (tmp_path / "agentd.yaml").write_text(f"store: {{url: '{postgres_url}'}}\n")
    harness = Harness(tmp_path / "data", store_url=postgres_url)
    try:
        await trail_of(harness, 4)
    finally:
        await harness.close()
    assert await cli(tmp_path, "audit", "verify") == 0
    assert "bot: ok, 4 events; head 4 " in capsys.readouterr().out
    export = tmp_path / "trail.jsonl"
    assert await cli(tmp_path, "audit", "export", "-o", str(export)) == 0
    assert (await verify_offline(export)).returncode == 0


async def test_a_chain_not_sealed_yet_is_reported_not_verified(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file an earlier agentd wrote, not opened since the upgrade (a daemon opens an agent's file at its
    first use): verify, which only reads, says so and does not pass it."""
    import sqlite3

    from agentd.store.sqlite.migrations import MIGRATIONS, migrate

    (tmp_path / "agents").mkdir()
    (tmp_path / "data").mkdir()
    conn = sqlite3.connect(tmp_path / "data" / "old.sqlite", isolation_level=None)
    migrate(conn, MIGRATIONS[:5])
    conn.execute("INSERT INTO audit (ts, agent, kind, action) VALUES (1, 'old', 'config', 'loaded')")
    conn.close()
    assert await cli(tmp_path, "audit", "verify") == 1
    out = capsys.readouterr().out
    assert out.startswith("old: NOT VERIFIED: written by an earlier agentd and not opened since")
