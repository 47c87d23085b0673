"""Chat turn latency while the memory model is up, down, and recovering (issue 10).

    python bench/memory_outage.py            # 60 turns per phase, 3 reps (~1 min)
    python bench/memory_outage.py --quick    # 20 turns per phase, 1 rep

An agent with `state` memory: its chat model answers in-process at once, its
fold model is a real OpenAI-compatible provider over HTTP (agentd's fake server
on loopback, the provider's own retries on). Phases, in one run:

- up:         the fold model answers every fold with a valid patch
- down:       it answers HTTP 500 to everything (the provider retries 3 times first)
- recovering: it answers again; turns go on until the breaker's probe has closed it
  and the queue is folded

Each turn is one message through `Agent.handle` (the conversation's next message
waits for nothing but its own turn); p50/p95 per phase, and the ratio of each
phase's p50 to the "up" p50 measured in the same rep. Prints a markdown table and
writes bench/results/memory_outage-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import (  # bench/_common.py: first, it puts the repository root on the path
    log,
    pct,
    write_results,
)

from agentd.config.loader import parse_agent
from agentd.config.models import DaemonSpec
from agentd.daemon import Resources
from agentd.events import InboundEvent
from agentd.messages import Message
from agentd.providers.base import Completion, CompletionRequest, Usage
from testkit.fake_llm import FakeLLM

AGENT = """\
model: chat/m
memory:
  strategy:
    kind: state
    spec: what the person is working on
    fields: [{name: goal, description: the current goal}, {name: notes, description: anything else}]
    model: fold/m
"""
PATCH = '{"notes": "still talking"}'


class InstantChat:
    name = "chat"

    async def complete(self, request: CompletionRequest) -> Completion:
        return Completion(Message.assistant("ok, noted."), Usage(100, 5))


async def one_rep(turns: int, folder: Path) -> dict[str, dict[str, float]]:
    with FakeLLM() as fake:
        settings = DaemonSpec.model_validate(
            {"providers": {"fold": {"kind": "openai", "base_url": fake.openai_base_url, "api_key": "k"}}}
        )
        spec = parse_agent(Path("bench.yaml"), text=AGENT, env={})
        out: dict[str, dict[str, float]] = {}
        async with Resources(settings, folder, providers={"chat": InstantChat()}) as resources:
            agent = await resources.open_agent(spec)
            for phase in ("up", "down", "recovering"):
                fake.clear()
                for _ in range(turns * 2):
                    if phase == "down":
                        fake.fail(500)
                    else:
                        fake.reply(PATCH)
                samples: list[float] = []
                i = 0
                # recovering lasts until the breaker's probe has closed it (at most 10 s)
                while i < turns or (phase == "recovering" and resources.breakers.describe() and i < 1000):
                    i += 1
                    event = InboundEvent("bench", "webhook:c", f"{phase} message {i}", "webhook", user_id="u")
                    t0 = time.perf_counter()
                    reply = await agent.handle(event)
                    samples.append((time.perf_counter() - t0) * 1000)
                    if reply.error is not None:
                        raise AssertionError(reply.text)
                    await asyncio.sleep(0.01)  # a person types; the work beside gets the loop
                await agent.drain(30)
                folds = sum(1 for r in fake.requests if r.path.endswith("/chat/completions"))
                out[phase] = {
                    "p50_ms": round(pct(samples, 50), 3),
                    "p95_ms": round(pct(samples, 95), 3),
                    "fold_requests": folds,
                }
                print(f"{phase:<11} p50={out[phase]['p50_ms']:.2f} ms folds={folds}", file=sys.stderr)
            await agent.drain(30)
            await agent.close()
    return out


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--turns", type=int)
    ap.add_argument("--reps", type=int)
    args = ap.parse_args()
    turns = args.turns or (20 if args.quick else 60)
    reps = args.reps or (1 if args.quick else 3)
    runs = []
    for _rep in range(reps):
        with tempfile.TemporaryDirectory() as folder:
            runs.append(await one_rep(turns, Path(folder)))
    lines = [
        f"## Chat turn latency with the memory (fold) model up, down and recovering ({turns} turns a phase,"
        f" {reps} rep(s), medians)",
        "",
        "| phase | turn p50 | turn p95 | p50 / up p50 | fold requests |",
        "|---|---|---|---|---|",
    ]
    for phase in ("up", "down", "recovering"):
        p50 = statistics.median(r[phase]["p50_ms"] for r in runs)
        p95 = statistics.median(r[phase]["p95_ms"] for r in runs)
        ratio = statistics.median(r[phase]["p50_ms"] / r["up"]["p50_ms"] for r in runs)
        folds = statistics.median(r[phase]["fold_requests"] for r in runs)
        lines.append(f"| {phase} | {p50:.2f} ms | {p95:.2f} ms | {ratio:.2f}× | {folds:.0f} |")
    print("\n".join(lines))
    out = write_results("memory_outage", {"turns": turns, "reps": reps, "runs": runs})
    log(f"wrote {out}")


if __name__ == "__main__":
    asyncio.run(main())
