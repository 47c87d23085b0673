"""`agentd tools AGENT`: every tool an agent has, with its source and what the policy decides.

Through the daemon that owns the data folder when one runs (its servers are
the ones the agent uses); else the agent's MCP servers are started here, asked
for their tools, and stopped, without touching the agent's data.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from agentd.cli.local import FolderPeers, agent_spec
from agentd.cli.remote import answer, running_daemon
from agentd.daemon.resources import Resources

CONNECT_WAIT_S = 15.0


def cmd_tools(args: argparse.Namespace) -> int:
    with running_daemon(args) as client:
        if client is not None:
            report: dict[str, Any] = answer(client.get(f"/agents/{args.agent}/tools"))
        else:
            report = asyncio.run(_in_process(args))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(render_tools(report))
    servers = report["servers"].values()
    problems = [p for server in servers for p in server["problems"]]
    # a server that cannot be reached (restarting, or still not connected) is a problem too
    return 1 if problems or any(server["status"] != "running" for server in servers) else 0


async def _in_process(args: argparse.Namespace) -> dict[str, Any]:
    settings, spec = agent_spec(args)
    async with Resources(settings, args.data) as resources:
        agent = resources.build_agent(spec, FolderPeers(args.agents, settings.defaults.model), readonly=True)
        try:
            await agent.start_tool_servers()
            # each server's first connection made or failed: a server that is down is not waited for
            await agent.state.tool_servers.wait_started(CONNECT_WAIT_S)
            return agent.tools_report()
        finally:
            await agent.stop_tool_servers()


def render_tools(report: dict[str, Any]) -> str:
    rows = [("TOOL", "SOURCE", "DECISION", "HINTS", "RULE")]
    rows += [
        (t["name"], t["source"], t["decision"], _hints(t.get("hints") or {}), t["rule"])
        for t in report["tools"]
    ]
    widths = [max(len(str(r[i])) for r in rows) for i in range(4)]
    lines = [f"agent {report['agent']}"]
    lines += [
        "  ".join(str(c).ljust(w) for c, w in zip(r[:4], widths, strict=True)) + "  " + r[4] for r in rows
    ]
    for name, server in report["servers"].items():
        state = server["status"] + (f" ({server['error']})" if server["error"] else "")
        lines.append(f"server {name} ({server['transport']}): {state}, {len(server['tools'])} tools")
        lines += [f"  problem: {p}" for p in server["problems"]]
        lines += [f"  not offered: {tool}: {why}" for tool, why in server.get("not_offered", {}).items()]
        if server["status"] != "running":  # why it is down: how its last run ended, what it said
            if server.get("exit_status") is not None:
                lines.append(f"  exit status: {server['exit_status']}")
            lines += [f"  stderr: {line}" for line in server.get("stderr", [])[-5:]]
        lines += [f"  log: {entry['level']}: {entry['message']}" for entry in server.get("log", [])[-5:]]
    if not report["servers"]:
        lines.append("no MCP servers (tools.mcp)")
    return "\n".join(lines)


def _hints(hints: dict[str, bool]) -> str:
    """`readOnly`, `destructive,idempotent`: the hints a server states true (--json has them all)."""
    return ",".join(name.removesuffix("Hint") for name, value in hints.items() if value) or "-"
