"""What one MCP tool call costs through agentd, next to calling the same server directly (issue 8).

    nice python bench/tools.py            # 300 calls per measurement, 3 reps
    nice python bench/tools.py --quick    # 60 calls, 1 rep

The server is agentd's fake MCP server (the SDK's own server API), over stdio
(a subprocess) and over Streamable HTTP (uvicorn on 127.0.0.1 in this loop);
the call is its `echo` tool with a short text. In the same run, for each
transport:

- direct:      the SDK's `Client.call_tool`, one call after another
- tool turn:   one message through `Agent.handle` whose model (in-process,
               instant) calls `files__echo` once, then answers
- plain turn:  the same agent, a message the model answers without a tool

The tool step through agentd is `tool turn - plain turn` (the second model
call is instant and in-process); its overhead is `tool step - direct`: the
policy, the audit row, the `_meta`, the bigger commit, agentd's supervision
around the SDK's client. p50 and p95 in ms; writes bench/results/tools-<time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from _common import (  # bench/_common.py: first, it puts the repository root on the path
    log,
    pct,
    write_results,
)
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from agentd.config.loader import parse_agent
from agentd.config.models import DaemonSpec
from agentd.daemon import Resources
from agentd.events import InboundEvent
from agentd.messages import Message, ToolCallPart
from agentd.providers.base import Completion, CompletionRequest, Usage
from testkit.fake_mcp import serve_http, stdio_command


class OneToolCall:
    """A model that calls `files__echo` when the message asks for it, and answers at once otherwise."""

    name = "scripted"

    async def complete(self, request: CompletionRequest) -> Completion:
        last = request.messages[-1]
        if last.role == "user" and last.text.startswith("echo"):
            call = ToolCallPart(
                id=f"c{len(request.messages)}", name="files__echo", arguments={"text": "ping"}
            )
            return Completion(Message(role="assistant", parts=(call,)), Usage(100, 5))
        return Completion(Message.assistant("done"), Usage(100, 5))


async def timed(n: int, call: Callable[[int], Awaitable[Any]]) -> list[float]:
    for i in range(5):  # warm up
        await call(-1 - i)
    out = []
    for i in range(n):
        started = time.perf_counter()
        await call(i)
        out.append((time.perf_counter() - started) * 1000)
    return out


async def direct(server: Any, n: int) -> list[float]:
    async with Client(server) as client:

        async def call(_: int) -> None:
            result = await client.call_tool("echo", {"text": "ping"})
            assert not result.is_error

        return await timed(n, call)


async def through_agentd(entry: dict[str, Any], data: Path, n: int) -> tuple[list[float], list[float]]:
    yaml_text = (
        "model: scripted/m\nmemory: {scope: none}\n"
        f"tools: {json.dumps({'mcp': {'files': entry}, 'audit_args': 'redacted'})}\n"
    )
    spec = parse_agent(Path("bench.yaml"), text=yaml_text, env={})
    async with Resources(DaemonSpec(), data, providers={"scripted": OneToolCall()}) as resources:
        agent = await resources.open_agent(spec)
        try:
            await agent.state.tool_servers.wait_ready(30)

            def turn(text: str) -> Callable[[int], Awaitable[Any]]:
                async def run(i: int) -> None:
                    reply = await agent.handle(
                        InboundEvent(agent.name, f"webhook:b{i}", text, "webhook", "u1")
                    )
                    assert reply.text == "done", reply.text

                return run

            with_tool = await timed(n, turn("echo ping"))
            plain = await timed(n, turn("hello"))
        finally:
            await agent.drain(10)
            await agent.close()
    return with_tool, plain


def summary(xs: list[float]) -> dict[str, float]:
    return {"p50": round(statistics.median(xs), 3), "p95": round(pct(xs, 95), 3)}


async def measure(n: int, reps: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="agentd-bench-tools-"))
    files = root / "files"
    files.mkdir()
    results: dict[str, Any] = {}
    async with serve_http(files) as url:
        transports = {
            "stdio": (
                StdioServerParameters(
                    command=stdio_command()[0], args=stdio_command()[1:], env={"ROOT": str(files)}
                ),
                {"command": stdio_command(), "env": {"ROOT": str(files)}},
            ),
            "http": (url, {"url": url}),
        }
        for rep in range(reps):
            for name, (sdk_server, entry) in transports.items():
                direct_ms = await direct(sdk_server, n)
                tool_ms, plain_ms = await through_agentd(entry, root / f"data-{name}-{rep}", n)
                results.setdefault(name, []).append(
                    {
                        "direct": summary(direct_ms),
                        "tool_turn": summary(tool_ms),
                        "plain_turn": summary(plain_ms),
                    }
                )
                print(f"rep {rep + 1} {name}: {results[name][-1]}", file=sys.stderr)
    return results


def table(results: dict[str, Any]) -> str:
    lines = [
        "| transport | direct SDK call p50 (p95) | plain turn p50 | tool turn p50 (p95) | tool step via agentd p50 | overhead p50 |",
        "|---|---|---|---|---|---|",
    ]
    for name, reps in results.items():
        direct_p50 = statistics.median(r["direct"]["p50"] for r in reps)
        direct_p95 = statistics.median(r["direct"]["p95"] for r in reps)
        plain = statistics.median(r["plain_turn"]["p50"] for r in reps)
        tool = statistics.median(r["tool_turn"]["p50"] for r in reps)
        tool_p95 = statistics.median(r["tool_turn"]["p95"] for r in reps)
        step = tool - plain
        lines.append(
            f"| {name} | {direct_p50:.2f} ms ({direct_p95:.2f}) | {plain:.2f} ms | {tool:.2f} ms ({tool_p95:.2f}) "
            f"| {step:.2f} ms | {step - direct_p50:+.2f} ms |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--calls", type=int, default=None)
    parser.add_argument("--reps", type=int, default=None)
    args = parser.parse_args()
    n = args.calls or (60 if args.quick else 300)
    reps = args.reps or (1 if args.quick else 3)
    results = asyncio.run(measure(n, reps))
    print(table(results))
    out = write_results("tools", {"calls": n, "reps": reps, "results": results}, indent=2)
    log(f"wrote {out}")


if __name__ == "__main__":
    main()
