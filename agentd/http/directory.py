"""What the daemon exposes to the HTTP layer: one protocol, imported by the API and the /ui/ pages alike."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from fastapi import Request

from agentd.engine.agent import Agent
from agentd.engine.linking import People
from agentd.engine.metering import Meter


class AgentDirectory(Protocol):
    """What the daemon exposes to the HTTP layer."""

    token: str | None
    max_body_bytes: int

    @property
    def daemon_id(self) -> str:
        """This daemon's name where several share a store (host:pid:random), as its runs record it."""
        ...

    def agent(self, name: str) -> Agent | None: ...

    def agent_problem(self, name: str) -> str | None:
        """Why the listed agent `name` has no running runtime ("its file was rejected: ..."), or None when
        no agent has that name."""
        ...

    def has_webhook(self, name: str) -> bool: ...

    def describe_agents(self) -> list[dict[str, Any]]: ...

    async def readiness(self) -> str | None:
        """Why this daemon should get no traffic now (None: it should); never names a host or port."""
        ...

    def describe_daemon(self) -> dict[str, Any]:
        """What the daemon holds for every agent: open files, the hot threads' memory."""
        ...

    def memory_models(self) -> dict[str, dict[str, Any]]:
        """Memory models that failed lately, by reference: their breaker (open, failures, retry in)."""
        ...

    async def query_audit(
        self, agent: str | None, kind: str | None, since: float | None, limit: int, tool: str | None = None
    ) -> list[dict[str, Any]]: ...

    async def export_person(self, user_id: str) -> dict[str, Any]:
        """Everything held about one person across every agent: {user_id, exported_at, agents, failed}."""
        ...

    async def erase_person(self, user_id: str, by: str) -> dict[str, Any]:
        """Erase one person everywhere: {user_id, subject, erased (counts per agent), failed}."""
        ...

    @property
    def people(self) -> People:
        """The accounts linked into people (kept in the daemon's own store)."""
        ...

    def note_auth_failure(self, path: str, reason: str, client: str | None) -> None:
        """Count a refused token check (audited coalesced, never waiting on the store: auth_failures.py)."""
        ...

    def platform_endpoint(self, path: str) -> Callable[[Request], Awaitable[Any]] | None: ...

    def metrics_text(self) -> tuple[bytes, str]:
        """GET /metrics: the Prometheus exposition and its content type."""
        ...

    def usage_meter(self) -> Meter | None:
        """The daemon's meter (GET /usage, the usage page); None until its store is open."""
        ...
