"""Agents opened in this process by the CLI (`chat`, `inspect`), built exactly as the daemon builds them."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

from agentd.cli.remote import answer, running_daemon
from agentd.cli.reports import render_inspection
from agentd.cli.settings import settings_of
from agentd.config.folder import find_agent_file
from agentd.config.loader import parse_agent
from agentd.config.models import AgentSpec, DaemonSpec
from agentd.daemon.resources import Resources, store_url_of
from agentd.engine.agent import Agent
from agentd.errors import AgentdError, ConfigError
from agentd.events import InboundEvent, Reply, is_conversation_key
from agentd.store.folder_lock import probe

T = TypeVar("T")


class FolderPeers:
    """Other agents as their files define them: enough to know a sub-agent slot's memory; none run here."""

    def __init__(self, agents_dir: Path, default_model: str | None):
        self._dir = agents_dir
        self._default_model = default_model

    def spec(self, name: str) -> AgentSpec | None:
        path = find_agent_file(self._dir, name)
        if path is None:
            return None
        try:
            return parse_agent(path, default_model=self._default_model)
        except (OSError, ConfigError):
            return None

    def running(self, name: str) -> bool:
        return False

    async def delegate(self, name: str, event: InboundEvent, parent_run_id: str | None) -> Reply:
        raise LookupError(f"{name} does not run in this process")


def agent_spec(args: argparse.Namespace) -> tuple[DaemonSpec, AgentSpec]:
    """agentd.yaml and the definition of args.agent, parsed as the daemon parses them."""
    path = find_agent_file(args.agents, args.agent)
    if path is None:
        raise AgentdError(f"no agent file {args.agents / args.agent}.yaml")
    settings = settings_of(args)
    return settings, parse_agent(path, default_model=settings.defaults.model)


@asynccontextmanager
async def local_agent(args: argparse.Namespace, *, readonly: bool = False) -> AsyncIterator[Agent]:
    """The agent args.agent, opened in-process from the agents folder and agentd.yaml."""
    settings, spec = agent_spec(args)
    async with Resources(settings, args.data) as resources:
        agent = await resources.open_agent(
            spec, FolderPeers(args.agents, settings.defaults.model), readonly=readonly
        )
        try:
            yield agent
        finally:
            await agent.drain(30)
            await agent.close()


def run_with_agent(
    args: argparse.Namespace, job: Callable[[Agent], Awaitable[T]], readonly: bool = False
) -> T:
    async def go() -> T:
        async with local_agent(args, readonly=readonly) as agent:
            return await job(agent)

    return asyncio.run(go())


def cmd_inspect(args: argparse.Namespace) -> int:
    if not is_conversation_key(args.key):
        print(
            f"agentd: {args.key!r} is not a conversation key (<channel>:<id>, e.g. webhook:t-1)",
            file=sys.stderr,
        )
        return 2
    data_file = args.data / f"{args.agent}.sqlite"
    shared = store_url_of(settings_of(args)) is not None
    if not shared and find_agent_file(args.agents, args.agent) is not None and not data_file.exists():
        print(f"agentd: no data file {data_file} (has agent {args.agent!r} run yet?)", file=sys.stderr)
        return 1

    async def look(agent: Agent) -> dict[str, Any]:
        return await agent.inspect(args.key)

    # Beside a running daemon the file is its own: read it, write nothing. A PostgreSQL store may have
    # daemons anywhere, so it is only ever read (an agent with nothing stored there is NotStored).
    inspected = run_with_agent(args, look, readonly=shared or probe(args.data) is not None)
    if args.json:
        print(json.dumps(inspected, indent=2, ensure_ascii=False, default=str))
    else:
        print(render_inspection(inspected))
    return 0


def cmd_forget_episodes(args: argparse.Namespace) -> int:
    """Through the daemon that owns the data folder when one runs, else in this process."""
    with running_daemon(args) as client:
        if client is not None:
            deleted = answer(client.delete(f"/agents/{args.agent}/people/{args.user_id}/episodes"))["deleted"]
        else:

            async def forget(agent: Agent) -> int:
                return await agent.forget_episodes(args.user_id, by="cli")

            deleted = run_with_agent(args, forget)
    print(f"deleted {deleted} episode(s) of {args.user_id} from {args.agent}")
    return 0
