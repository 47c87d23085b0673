"""Tokens sent per turn over a long conversation, per memory strategy, against full replay.

    python bench/tokens.py [--turns 500] [--json PATH]
    python bench/tokens.py --quick    # smoke run: a 60-turn conversation

Each strategy runs the same scripted conversation through the real engine and
SQLite. The chat model is a counting model: it reports as input tokens what
it was sent (characters / 4, the same estimate the runtime uses) and answers
with a fixed-length reply. The memory models (compaction, rolling summaries,
state folds) are deterministic and cheap, and their tokens are counted too:
what a strategy saves on every turn it may spend on its own runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from _common import log, write_results  # bench/_common.py: first, it puts the repository root on the path

from agentd.config.loader import parse_agent
from agentd.config.models import DaemonSpec
from agentd.daemon import Resources
from agentd.events import InboundEvent
from agentd.messages import Message
from agentd.providers.base import Completion, CompletionRequest, Usage
from agentd.store.queries import Runs

REPLY = "Noted. " + "Here is a short, helpful answer about that. " * 4  # ~180 chars
TOPICS = ["the deploy", "the invoice", "the trip to Porto", "the migration", "the hiring plan", "the budget"]


def user_text(i: int, rng: random.Random) -> str:
    topic = rng.choice(TOPICS)
    return f"Turn {i}: about {topic}, " + " ".join(
        rng.choice(["please", "also", "check", "update", "note"]) for _ in range(40)
    )


def request_tokens(request: CompletionRequest) -> int:
    chars = len(request.system) + sum(m.char_count() for m in request.messages)
    return (chars + 3) // 4


class CountingChat:
    """The chat model: reports what it was sent, answers a fixed reply."""

    name = "chat"

    async def complete(self, request: CompletionRequest) -> Completion:
        return Completion(Message.assistant(REPLY), Usage(request_tokens(request), len(REPLY) // 4))


class MemoryModel:
    """Deterministic memory work: short summaries, and state patches that set only changed keys."""

    name = "mem"

    async def complete(self, request: CompletionRequest) -> Completion:
        source = request.messages[-1].text if request.messages else ""
        if request.purpose == "summary":
            text = "Summary: the person asked about " + ", ".join(t for t in TOPICS if t in source) + "."
        else:  # a fold: set `working_on` to the newest topic mentioned
            topics = [t for t in TOPICS if t in source]
            text = json.dumps({"working_on": topics[-1] if topics else None})
        return Completion(Message.assistant(text), Usage(request_tokens(request), len(text) // 4))


STRATEGIES: dict[str, str] = {
    "full replay (no compaction)": "memory: {scope: thread, compact_at_tokens: false}",
    "full + compaction at 8000": "model: {name: chat/m, small: mem/s}\nmemory: {scope: thread, compact_at_tokens: 8000}",
    "window 20": "memory: {strategy: {kind: window, messages: 20}}",
    "summarized every 20": "memory: {strategy: {kind: summarized, every: 20, model: mem/s}}",
    "state (3 fields)": (
        "memory: {strategy: {kind: state, model: mem/s, spec: 'Track the work.', fields: ["
        "{name: goal, description: what they want}, {name: working_on, description: the current topic},"
        " {name: open, description: what is unresolved}]}}"
    ),
    "composite window 10 + summarized 20": (
        "memory: {strategy: {kind: composite, layers: [{kind: window, messages: 10},"
        " {kind: summarized, every: 20, model: mem/s}]}}"
    ),
}


async def run_strategy(name: str, memory_yaml: str, turns: int, folder: Path) -> dict[str, object]:
    text = memory_yaml if memory_yaml.startswith("model:") else f"model: chat/m\n{memory_yaml}"
    spec = parse_agent(Path("bench.yaml"), text=f"purpose: You are a helpful assistant.\n{text}\n", env={})
    slug = "".join(c if c.isalnum() else "-" for c in name.lower())
    models = {"chat": CountingChat(), "mem": MemoryModel()}
    async with Resources(DaemonSpec(), folder / slug, providers=models) as resources:
        agent = await resources.open_agent(spec)
        rng = random.Random(7)
        started = time.perf_counter()
        for i in range(turns):
            await agent.handle(
                InboundEvent("bench", "webhook:c1", user_text(i, rng), "webhook", user_id="u1")
            )
        await agent.drain(30)
        elapsed = time.perf_counter() - started
        runs = await agent.state.store.read(Runs(None, 1_000_000))
        await agent.close()
    rows = [(r["trigger"], r["input_tokens"], r["output_tokens"]) for r in runs]
    chat = [tin for trigger, tin, _ in rows if trigger == "message"]
    memory_in = sum(tin for trigger, tin, _ in rows if trigger != "message")
    memory_runs = sum(1 for trigger, _, _ in rows if trigger != "message")
    return {
        "strategy": name,
        "turns": len(chat),
        "mean_input": statistics.fmean(chat),
        "p50_input": statistics.median(chat),
        "last_input": chat[-1],
        "chat_total": sum(chat),
        "memory_runs": memory_runs,
        "memory_input_total": memory_in,
        "total": sum(chat) + memory_in,
        "seconds": elapsed,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=None, help="turns of the conversation (500; quick 60)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: a 60-turn conversation")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    args = parser.parse_args()
    args.turns = args.turns or (60 if args.quick else 500)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, memory_yaml in STRATEGIES.items():
            results.append(await run_strategy(name, memory_yaml, args.turns, Path(tmp)))
    base = results[0]["total"]
    print(f"\nTokens sent per turn over a {args.turns}-turn conversation (input tokens, chars/4)\n")
    print(
        "| strategy | mean/turn | p50/turn | last turn | memory runs | memory input | total | vs full replay |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['strategy']} | {r['mean_input']:,.0f} | {r['p50_input']:,.0f} | {r['last_input']:,} | "
            f"{r['memory_runs']} | {r['memory_input_total']:,} | {r['total']:,} | {r['total'] / base:.3f}x |"  # type: ignore[operator]
        )
    out = write_results("tokens", {"turns": args.turns, "results": results}, indent=2)
    log(f"wrote {out}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
