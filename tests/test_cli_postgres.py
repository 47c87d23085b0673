"""The CLI on a PostgreSQL store (store.url in agentd.yaml, or AGENTD_STORE_URL): `audit`, `runs`,
`memories` and `inspect` read the database and create nothing; `forget-episodes` and `chat` work in
this process beside whatever daemons share it (claims order the turns)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentd.cli import main
from agentd.daemon import Daemon
from agentd.events import InboundEvent
from agentd.store.queries import ActiveThread, EpisodeCounts, Memories
from testkit.postgres import PostgresServer
from tests.support import Harness

ASSISTANT = (
    "memory:\n  persistent: true\n  strategy: {kind: composite, layers: [{kind: window, messages: 4},"
    " {kind: episodic, top_k: 3}]}\nchannels: {webhook: {}}\n"
)


@pytest.fixture
def root(tmp_path: Path, postgres_url: str) -> Path:
    """agents/assistant.yaml, agentd.yaml naming the database, and a daemon's conversation in it."""
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "assistant.yaml").write_text(ASSISTANT)
    (tmp_path / "agentd.yaml").write_text(f"embedder: hash/64\nstore: {{url: '{postgres_url}'}}\n")

    async def talk() -> None:
        async with Daemon(tmp_path / "agents", tmp_path / "elsewhere", reload_interval=60) as daemon:
            agent = daemon.agent("assistant")
            assert agent is not None
            for text in ("remember city: Lisbon", "My car is a blue Volvo.", "I was born in Porto."):
                await agent.handle(InboundEvent("assistant", "webhook:c1", text, "webhook", user_id="ana"))
            assert await agent.drain(5)

    asyncio.run(talk())
    return tmp_path


def cli(root: Path, *args: str) -> list[str]:
    return [*args, "--agents", str(root / "agents"), "--data", str(root / "data")]


def agents_in(server: PostgresServer, url: str) -> list[str]:
    out = server.psql("SELECT name FROM agentd.agents ORDER BY name", database=url.rsplit("/", 1)[1])
    return out.split()


def test_audit_runs_and_memories_read_the_database(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(cli(root, "memories", "assistant")) == 0
    assert "city: Lisbon" in capsys.readouterr().out
    assert main(cli(root, "runs", "assistant", "--json")) == 0
    runs = json.loads(capsys.readouterr().out)
    assert [r["trigger"] for r in runs] == ["message"] * 3 and {r["conversation_key"] for r in runs} == {
        "webhook:c1"
    }
    assert main(cli(root, "audit", "assistant", "--json")) == 0
    events = json.loads(capsys.readouterr().out)
    # its own trail and the daemon's about it (kept as agent _daemon in the same database)
    assert ("config", "loaded") in [(e["kind"], e["action"]) for e in events]
    assert ("memory", "remember") in [(e["kind"], e["action"]) for e in events]
    assert not (root / "data").exists()  # no SQLite file was looked for, let alone made


def test_the_url_may_come_from_the_environment(
    root: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (root / "agentd.yaml").write_text("embedder: hash/64\n")
    monkeypatch.setenv("AGENTD_STORE_URL", postgres_url)
    assert main(cli(root, "memories", "assistant")) == 0
    assert "city: Lisbon" in capsys.readouterr().out


def test_a_read_only_look_at_an_agent_with_no_data_creates_nothing(
    root: Path, postgres_server: PostgresServer, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (root / "agents" / "fresh.yaml").write_text(ASSISTANT)  # an agent no daemon has run yet
    known = agents_in(postgres_server, postgres_url)
    with pytest.raises(
        SystemExit, match=r"no data for agent 'fresh' in postgresql://127\.0\.0\.1:\d+/test_\w+ \(has"
    ):
        main(cli(root, "runs", "fresh"))
    with pytest.raises(SystemExit, match="no audit events of agent 'ghost'"):
        main(cli(root, "audit", "ghost"))
    assert main(cli(root, "inspect", "fresh", "webhook:c1")) == 1
    assert "agentd: no data for agent 'fresh' in postgresql://" in capsys.readouterr().err
    assert agents_in(postgres_server, postgres_url) == known == ["_daemon", "assistant"]


def test_inspect_reads_the_database_and_writes_nothing(
    root: Path, postgres_server: PostgresServer, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    database = postgres_url.rsplit("/", 1)[1]

    def rows() -> str:  # everything a write could change, in one line
        return postgres_server.psql(
            "SELECT (SELECT count(*) FROM agentd.audit), (SELECT count(*) FROM agentd.runs),"
            " (SELECT max(layers_version) FROM agentd.threads), (SELECT count(*) FROM agentd.memory_state)",
            database=database,
        )

    before = rows()
    assert main(cli(root, "inspect", "assistant", "webhook:c1", "--json")) == 0
    inspected = json.loads(capsys.readouterr().out)
    assert [layer["kind"] for layer in inspected["layers"]] == ["window", "episodic"]
    assert "city" in json.dumps(inspected["persistent"])
    assert main(cli(root, "inspect", "assistant", "webhook:c1")) == 0
    assert "== layer 1:episodic (episodic) ==" in capsys.readouterr().out
    assert rows() == before


def test_forget_episodes_deletes_them_in_the_database(
    root: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(cli(root, "forget-episodes", "assistant", "ana")) == 0
    assert "deleted 3 episode(s) of ana from assistant" in capsys.readouterr().out

    async def left() -> dict[str, int]:
        h = Harness(root / "elsewhere", store_url=postgres_url)
        try:
            return await (await h.agent(ASSISTANT, "assistant")).state.store.read(
                EpisodeCounts("user:ana", None)
            )
        finally:
            await h.close()

    assert asyncio.run(left())["total"] == 0


def test_chat_runs_in_this_process_on_the_database(root: Path, postgres_url: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agentd.cli", *cli(root, "chat", "assistant", "--session", "term")],
        input="remember tea: green\nwhat do you remember\nexit\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "Remembered tea." in done.stdout

    async def seen() -> tuple[list[Any], int]:  # by another daemon on the same database
        h = Harness(root / "elsewhere", store_url=postgres_url)
        try:
            store = (await h.agent(ASSISTANT, "assistant")).state.store
            memories = await store.read(Memories())
            thread = await store.read(ActiveThread("repl:term"))
            return [m["key"] for m in memories], len(thread.messages)
        finally:
            await h.close()

    keys, messages = asyncio.run(seen())
    assert keys == ["city", "tea"] and messages >= 4
    assert not (root / "data").exists()
