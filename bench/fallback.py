"""Turn latency along a fallback chain (primary up, down with its breaker open, recovering), and the time
from /stop to the next message served (issue 19).

    python bench/fallback.py            # 40 turns a phase, 20 stops, 3 reps
    python bench/fallback.py --quick    # 10 turns a phase, 5 stops, 1 rep

The agent's primary is an Anthropic model on one fake server, its fallback an OpenAI model on another
(agentd's fake servers on loopback, over real HTTP, the providers' own retries off). Phases, in one run:

- up:         the primary answers every turn
- down:       the primary answers 529 (overloaded) to everything: the first turn tries it and falls
              back, which opens its breaker; the following turns skip it and go straight to the fallback
- recovering: the primary answers again and its pause is over (the breakers' clock is the bench's):
              the first turn tries it again, a success closes the breaker, the rest are the primary's

Then, `stops` times: a turn whose model call hangs, `/stop` sent while it waits, and the next message:
the time from sending /stop to that message's reply (its model answers at once), p50/p95.
Prints a markdown table and writes bench/results/fallback-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _common import (  # bench/_common.py: first, it puts the repository root on the path
    log,
    pct,
    write_results,
)

from agentd.config.loader import parse_agent
from agentd.config.models import DaemonSpec
from agentd.daemon import Resources
from agentd.engine.agent import Agent
from agentd.engine.breakers import Breakers
from agentd.events import InboundEvent, Reply
from testkit.fake_llm import FakeLLM
from testkit.waiting import wait_until

AGENT = """\
model: {name: claude/sonnet, fallbacks: [gpt/mini]}
memory: {scope: thread}
"""
PAUSE_S = 30.0
PHASES = ("up", "down", "recovering")


class Clock:
    """The breakers' clock: a pause ends when the bench moves it, not after real seconds."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def say(agent: Agent, text: str, key: str = "webhook:c") -> Reply:
    return await agent.handle(InboundEvent("bench", key, text, "webhook", user_id="u"))


async def timed(agent: Agent, text: str) -> tuple[float, Reply]:
    t0 = time.perf_counter()
    reply = await say(agent, text)
    return (time.perf_counter() - t0) * 1000, reply


def stats(samples: list[float]) -> dict[str, float]:
    return {"p50_ms": round(pct(samples, 50), 3), "p95_ms": round(pct(samples, 95), 3)}


async def one_rep(turns: int, stops: int, folder: Path) -> dict[str, dict[str, float]]:
    with FakeLLM() as claude, FakeLLM() as gpt:
        settings = DaemonSpec.model_validate(
            {
                "providers": {
                    "claude": {
                        "kind": "anthropic",
                        "base_url": claude.anthropic_base_url,
                        "api_key": "k",
                        "max_retries": 0,
                    },
                    "gpt": {
                        "kind": "openai",
                        "base_url": gpt.openai_base_url,
                        "api_key": "k",
                        "max_retries": 0,
                    },
                }
            }
        )
        clock = Clock()
        breakers = Breakers(first_pause_s=PAUSE_S, clock=clock)
        out: dict[str, dict[str, float]] = {}
        async with Resources(settings, folder, breakers=breakers) as resources:
            agent = await resources.open_agent(parse_agent(Path("bench.yaml"), text=AGENT, env={}))
            for phase in PHASES:
                if phase == "down":
                    claude.down(529)
                elif phase == "recovering":
                    claude.up()
                    clock.now += PAUSE_S * 2  # the pause is over: the next turn tries the primary again
                before = (len(claude.requests), len(gpt.requests))
                samples = []
                for i in range(turns):
                    ms, reply = await timed(agent, f"{phase} message {i}")
                    if reply.error is not None:
                        raise AssertionError(reply.text)
                    samples.append(ms)
                out[phase] = {
                    **stats(samples),
                    "first_turn_ms": round(samples[0], 3),
                    "primary_requests": len(claude.requests) - before[0],
                    "fallback_requests": len(gpt.requests) - before[1],
                }
                print(f"{phase:<11} p50={out[phase]['p50_ms']:.2f} ms {out[phase]}", file=sys.stderr)
            out["stop"] = await stop_to_next(agent, claude, stops)
            print(f"stop        {out['stop']}", file=sys.stderr)
            await agent.drain(30)
            await agent.close()
    return out


def more_requests(fake: FakeLLM, seen: int) -> Callable[[], bool]:
    return lambda: len(fake.requests) > seen


async def stop_to_next(agent: Agent, primary: FakeLLM, stops: int) -> dict[str, float]:
    """From sending /stop (a turn's model call hanging) to the next message's reply."""
    samples = []
    for i in range(stops):
        primary.hang(60)
        seen = len(primary.requests)
        turn = asyncio.create_task(say(agent, f"a long question {i}"))
        await wait_until(more_requests(primary, seen), "the model call to be in flight")
        t0 = time.perf_counter()
        await say(agent, "/stop")
        nxt = await say(agent, f"next {i}")
        samples.append((time.perf_counter() - t0) * 1000)
        stopped = await turn
        if stopped.error != "stopped" or nxt.error is not None:
            raise AssertionError(f"{stopped.text!r} / {nxt.text!r}")
    return stats(samples)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--turns", type=int)
    ap.add_argument("--stops", type=int)
    ap.add_argument("--reps", type=int)
    args = ap.parse_args()
    turns = args.turns or (10 if args.quick else 40)
    stops = args.stops or (5 if args.quick else 20)
    reps = args.reps or (1 if args.quick else 3)
    runs = []
    for _rep in range(reps):
        with tempfile.TemporaryDirectory() as folder:
            runs.append(await one_rep(turns, stops, Path(folder)))
    lines = [
        f"## Turn latency along a fallback chain ({turns} turns a phase, {reps} rep(s), medians over reps)",
        "",
        "| phase | turn p50 | turn p95 | first turn | primary requests | fallback requests |",
        "|---|---|---|---|---|---|",
    ]
    for phase in PHASES:
        cell = {k: statistics.median(r[phase][k] for r in runs) for k in runs[0][phase]}
        lines.append(
            f"| {phase} | {cell['p50_ms']:.2f} ms | {cell['p95_ms']:.2f} ms | {cell['first_turn_ms']:.2f} ms |"
            f" {cell['primary_requests']:.0f} | {cell['fallback_requests']:.0f} |"
        )
    stop = {k: statistics.median(r["stop"][k] for r in runs) for k in runs[0]["stop"]}
    lines += [
        "",
        f"/stop to the next message served ({stops} stops, {reps} rep(s)): p50 {stop['p50_ms']:.2f} ms, "
        f"p95 {stop['p95_ms']:.2f} ms",
    ]
    print("\n".join(lines))
    out = write_results("fallback", {"turns": turns, "stops": stops, "reps": reps, "runs": runs})
    log(f"wrote {out}")


if __name__ == "__main__":
    asyncio.run(main())
