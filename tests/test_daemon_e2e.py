"""`agentd run` as a real process: HTTP, restart and replay, hot reload, drain, and kill -9."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from testkit.waiting import wait_until
from tests.daemon_process import DaemonProcess

pytestmark = pytest.mark.slow

ASSISTANT = """\
purpose: Help.
memory:
  scope: thread
  persistent: true
  compact_at_tokens: 400
channels:
  webhook: {}
"""


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "assistant.yaml").write_text(ASSISTANT)
    return tmp_path


@pytest.fixture
async def daemon(workdir: Path) -> AsyncIterator[DaemonProcess]:
    d = await DaemonProcess(workdir).start()
    yield d
    d.kill()


async def test_conversation_memory_compaction_and_audit_survive_a_restart(daemon: DaemonProcess) -> None:
    assert "I see 0 earlier" in daemon.say("hello")["reply"]
    assert daemon.say("remember city: Lisbon")["reply"] == "Remembered city."
    for i in range(6):
        daemon.say(f"message number {i} with some words to grow the context a little")
    await wait_until(
        lambda: any(r["trigger"] == "compaction" for r in daemon.get("/agents/assistant/runs")["runs"])
    )
    assert daemon.stop() == 0  # SIGTERM drains and exits 0

    await daemon.start()
    reply = daemon.say("after restart")["reply"]
    assert "and a summary of older turns" in reply and "Memory keys I hold: city" in reply
    assert daemon.say("recall city", conversation="elsewhere")["reply"] == "I remember: Lisbon"
    assert daemon.say("/status")["reply"].startswith("Agent: assistant")
    conversation = daemon.get("/agents/assistant/conversations/webhook:c1")
    assert conversation["summary"] and conversation["messages"][-1]["parts"][0]["text"].startswith(
        "(offline model)"
    )
    kinds = {(e["kind"], e["action"]) for e in daemon.get("/audit", agent="assistant")["events"]}
    assert {
        ("memory", "remember"),
        ("compaction", "ok"),
        ("command", "status"),
        ("config", "loaded"),
    } <= kinds
    assert daemon.stop() == 0
    db = sqlite3.connect(daemon.root / "data" / "assistant.sqlite")
    assert (
        db.execute("SELECT COUNT(*) FROM messages WHERE compacted = 1").fetchone()[0] > 0
    )  # kept, not deleted
    assert oct(os.stat(daemon.root / "data" / "assistant.sqlite").st_mode & 0o777) == "0o600"


async def test_hot_reload_add_edit_break_delete(daemon: DaemonProcess) -> None:
    agents = daemon.root / "agents"
    (agents / "second.yaml").write_text("purpose: first version\nchannels: {webhook: {}}\n")
    await wait_until(lambda: any(a["name"] == "second" for a in daemon.get("/agents")["agents"]))
    assert "You said: hi" in daemon.say("hi", agent="second")["reply"]

    (agents / "second.yaml").write_text(
        "purpose: second version\nmemory: {scope: thread}\nchannels: {webhook: {}}\n"
    )
    await wait_until(
        lambda: (
            next(a for a in daemon.get("/agents")["agents"] if a["name"] == "second")["memory"]["scope"]
            == "thread"
        )
    )

    (agents / "second.yaml").write_text("purpose: broken\nmemory: {scope: sometimes}\n")
    await wait_until(
        lambda: next(a for a in daemon.get("/agents")["agents"] if a["name"] == "second")["last_error"]
    )
    entry = next(a for a in daemon.get("/agents")["agents"] if a["name"] == "second")
    assert entry["status"] == "running" and "second.yaml:2:17" in entry["last_error"]
    assert (
        "You said: still" in daemon.say("still", agent="second")["reply"]
    )  # the last good definition serves
    rejected = [e for e in daemon.get("/audit", kind="config")["events"] if e["action"] == "rejected"]
    assert rejected and rejected[-1]["agent"] == "second"

    (agents / "second.yaml").unlink()
    await wait_until(lambda: all(a["name"] != "second" for a in daemon.get("/agents")["agents"]))
    r = httpx.post(f"{daemon.url}/agents/second/messages", json={"conversation_id": "x", "text": "hi"})
    assert r.status_code == 404


async def test_kill_9_under_load_loses_no_acknowledged_turn(workdir: Path) -> None:
    d = await DaemonProcess(workdir).start()
    acked: list[tuple[str, str]] = []
    lock = threading.Lock()
    stop = threading.Event()

    def client(n: int) -> None:
        with httpx.Client(timeout=5) as http:
            i = 0
            while not stop.is_set() and i < 400:
                text = f"client {n} turn {i}"
                try:
                    r = http.post(
                        f"{d.url}/agents/assistant/messages",
                        json={"conversation_id": f"load-{n}", "text": text},
                    )
                except httpx.HTTPError:
                    return
                if r.status_code == 200:
                    with lock:
                        acked.append((f"webhook:load-{n}", text))
                i += 1

    threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    await wait_until(lambda: len(acked) >= 150, timeout=30)
    assert d.proc is not None
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait()
    stop.set()
    for t in threads:
        t.join()

    db = sqlite3.connect(workdir / "data" / "assistant.sqlite")
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    stored = set(
        db.execute(
            "SELECT t.conversation_key, json_extract(m.body, '$.parts[0].text') FROM messages m"
            " JOIN threads t ON t.id = m.thread_id WHERE m.role = 'user'"
        ).fetchall()
    )
    missing = [turn for turn in acked if turn not in stored]
    assert not missing, f"{len(missing)} acknowledged turns lost"
    # no half turns: every stored person's message has its reply and its run row
    half = db.execute(
        "SELECT COUNT(*) FROM messages u WHERE u.role = 'user' AND NOT EXISTS"
        " (SELECT 1 FROM messages a WHERE a.thread_id = u.thread_id AND a.seq = u.seq + 1 AND a.role = 'assistant')"
    ).fetchone()[0]
    assert half == 0
    orphan_runs = db.execute(
        "SELECT COUNT(*) FROM messages m WHERE m.run_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = m.run_id)"
    ).fetchone()[0]
    assert orphan_runs == 0
    db.close()

    await d.start()  # the conversation continues
    reply = d.say("after the crash", conversation="load-0")["reply"]
    assert "earlier messages" in reply
    assert d.stop() == 0


def test_chat_repl_keeps_its_own_session(workdir: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "agentd.cli", "chat", "assistant", "--session", "me"],
        input=b"hello\nremember tea: green\n/status\n",
        cwd=workdir,
        capture_output=True,
        timeout=30,
    )
    out = run.stdout.decode()
    assert run.returncode == 0, run.stderr.decode()
    assert "I see 0 earlier messages" in out and "Remembered tea." in out and "Conversation: repl:me" in out
    listed = subprocess.run(
        [sys.executable, "-m", "agentd.cli", "memories", "assistant"],
        cwd=workdir,
        capture_output=True,
        timeout=30,
    )
    assert "tea: green" in listed.stdout.decode()
    audit = subprocess.run(
        [sys.executable, "-m", "agentd.cli", "audit", "assistant"],
        cwd=workdir,
        capture_output=True,
        timeout=30,
    )
    assert "memory" in audit.stdout.decode() and "remember" in audit.stdout.decode()
    runs = subprocess.run(
        [sys.executable, "-m", "agentd.cli", "runs", "assistant", "--json"],
        cwd=workdir,
        capture_output=True,
        timeout=30,
    )
    assert {r["conversation_key"] for r in __import__("json").loads(runs.stdout)} == {"repl:me"}


def test_chat_builds_the_agent_as_the_daemon_does_embedder_and_extractor_model_included(
    workdir: Path,
) -> None:
    """`agentd chat` once ignored agentd.yaml's embedder and memory_extractor_model (issue 7's defect)."""
    from testkit.fake_llm import FakeLLM

    with FakeLLM() as fake:
        (workdir / "agentd.yaml").write_text(
            f"providers: {{fake: {{kind: openai, base_url: '{fake.openai_base_url}', api_key: k}}}}\n"
            "embedder: hash/64\nmemory_extractor_model: fake/extractor\n"
        )
        (workdir / "agents" / "keeper.yaml").write_text(
            "memory:\n  strategy:\n    kind: composite\n    layers: [{kind: episodic}, {kind: semantic}]\n"
        )
        fake.reply('{"facts": [{"key": "pet", "value": "a cat called Tom", "confidence": 0.9}]}')
        run = subprocess.run(
            [sys.executable, "-m", "agentd.cli", "chat", "keeper"],
            input=b"My cat is called Tom and he is grey.\nWhat is my cat called?\n",
            cwd=workdir,
            capture_output=True,
            timeout=60,
        )
        out, err = run.stdout.decode(), run.stderr.decode()
        assert run.returncode == 0, err
        assert "no embedder configured" not in out + err
        # the second message was answered with the first exchange recalled by the embedder
        assert "some recalled earlier exchanges" in out.splitlines()[-1]
        # and the extraction went to the memory_extractor_model of agentd.yaml
        extraction = [r for r in fake.requests if r.json and r.json.get("model") == "extractor"]
        assert extraction and "My cat is called Tom" in str(extraction[0].json["messages"])
