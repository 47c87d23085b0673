"""The composition root: loads agents/, watches it, runs channels and HTTP, drains on a signal.

Only this module names concrete classes. One process, one event loop: the
HTTP server (uvicorn), every channel client and every agent share it; all
SQLite work goes through one store thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from agentd.channels.base import Channel, HttpChannel
from agentd.channels.registry import CHANNEL_KINDS, build_channel
from agentd.config.folder import agent_sources
from agentd.config.loader import parse_agent, parse_daemon
from agentd.config.models import AgentSpec, DaemonSpec, is_loopback
from agentd.engine.runtime import AgentRuntime
from agentd.errors import AgentdError, ConfigError, OperatorError
from agentd.events import InboundEvent, Reply
from agentd.http.app import create_app
from agentd.providers.embedders import build_embedder
from agentd.providers.registry import ProviderRegistry
from agentd.store.audit import AuditRecord, insert_audit, query_audit
from agentd.store.db import AgentStore, StoreExecutor
from agentd.store.inbound import prune_events

log = logging.getLogger("agentd")
DAEMON_FILE = "_daemon.sqlite"  # daemon-level audit (config, auth); '_' cannot start an agent name
CHANNEL_STOP_TIMEOUT = 5.0
GC_FREEZE_EVERY = 30.0  # seconds
PRUNE_EVERY = 3600.0  # seconds
DELIVERY_MEMORY_S = 7 * 86400.0


@dataclass
class AgentEntry:
    name: str
    path: Path
    fingerprint: tuple[tuple[int, int], ...] | None = None  # (mtime, size) of each file naming the agent
    spec: AgentSpec | None = None  # the last good definition
    runtime: AgentRuntime | None = None
    last_error: str | None = None
    channels: dict[str, Channel] = field(default_factory=dict)
    channel_tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    channel_status: dict[str, tuple[str, str | None]] = field(default_factory=dict)

    @property
    def status(self) -> str:
        if self.runtime is not None:
            return self.runtime.status
        return "error" if self.last_error else "stopped"


class AgentHost:
    """The ChannelHost a channel of one agent gets: dispatch, audit, status, nothing more."""

    def __init__(self, daemon: Daemon, entry: AgentEntry):
        self._daemon = daemon
        self._entry = entry
        self.agent = entry.name

    async def dispatch(self, event: InboundEvent) -> Reply:
        runtime = self._entry.runtime
        if runtime is None or runtime.status != "running":
            raise RuntimeError(f"agent {self.agent} is not running")
        return await runtime.handle(event)

    async def audit(
        self,
        kind: str,
        action: str,
        *,
        conversation_key: str | None = None,
        data: dict[str, Any] | None = None,
    ) -> None:
        if self._entry.runtime is not None:
            await self._entry.runtime.audit(kind, action, conversation_key=conversation_key, data=data)

    def set_status(self, channel: str, status: str, error: str | None = None) -> None:
        previous = self._entry.channel_status.get(channel)
        self._entry.channel_status[channel] = (status, error)
        if previous == (status, error):
            return
        if status == "failed":
            log.error("agent %s: channel %s failed: %s", self.agent, channel, error)
            if self._entry.runtime is not None:
                self._daemon.spawn(
                    self._entry.runtime.audit("channel", "failed", data={"channel": channel, "error": error})
                )
        else:
            log.info("agent %s: channel %s %s%s", self.agent, channel, status, f" ({error})" if error else "")


class EmbeddedServer(uvicorn.Server):
    """uvicorn without its own signal handling: the daemon owns shutdown order."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class Daemon:
    def __init__(
        self,
        agents_dir: Path,
        data_dir: Path,
        *,
        daemon_file: Path | None = None,
        host: str | None = None,
        port: int | None = None,
        reload_interval: float = 1.0,
    ):
        self.agents_dir = agents_dir
        self.data_dir = data_dir
        self.daemon_file = daemon_file if daemon_file is not None else agents_dir.parent / "agentd.yaml"
        self.settings: DaemonSpec = parse_daemon(self.daemon_file)
        self.host = host or self.settings.http.host
        self.port = self.settings.http.port if port is None else port
        self.token = self.settings.http.token
        self.max_body_bytes = self.settings.http.max_body_bytes
        if not is_loopback(self.host) and not self.token:
            raise OperatorError(
                f"refusing to listen on {self.host} without a token: set http.token in {self.daemon_file} "
                "(every request then needs Authorization: Bearer <token>), or bind to 127.0.0.1"
            )
        self.reload_interval = reload_interval
        self.entries: dict[str, AgentEntry] = {}
        self.executor = StoreExecutor()
        self.client = httpx.AsyncClient()
        self.providers = ProviderRegistry(self.settings.providers, self.client)
        self.embedder = (
            build_embedder(self.settings.embedder, self.settings.providers, self.client)
            if self.settings.embedder
            else None
        )
        self.daemon_store = AgentStore(data_dir / DAEMON_FILE, self.executor)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stop = asyncio.Event()
        self._signals = 0
        self.server: EmbeddedServer | None = None

    # -- AgentDirectory (for the HTTP layer) ------------------------------------------------

    def runtime(self, name: str) -> AgentRuntime | None:
        entry = self.entries.get(name)
        return entry.runtime if entry else None

    def has_webhook(self, name: str) -> bool:
        entry = self.entries.get(name)
        return bool(entry and entry.runtime and entry.runtime.spec.channels.webhook is not None)

    def describe_agents(self) -> list[dict[str, Any]]:
        out = []
        for name in sorted(self.entries):
            entry = self.entries[name]
            spec = entry.runtime.spec if entry.runtime else entry.spec
            channels = []
            if spec is not None:
                for ch in spec.channels.enabled():
                    status, error = entry.channel_status.get(
                        ch, ("running" if ch == "webhook" and entry.runtime else "stopped", None)
                    )
                    channels.append({"name": ch, "status": status, "error": error})
            out.append(
                {
                    "name": name,
                    "file": str(entry.path),
                    "model": spec.model.name if spec else None,
                    "memory": spec.memory.model_dump() if spec else None,
                    "channels": channels,
                    "status": entry.status,
                    "last_error": entry.last_error,
                }
            )
        return out

    async def query_audit(
        self, agent: str | None, kind: str | None, since: float | None, limit: int
    ) -> list[dict[str, Any]]:
        stores = [self.daemon_store] + [
            e.runtime.store for n, e in self.entries.items() if e.runtime and (agent is None or agent == n)
        ]
        merged: list[dict[str, Any]] = []
        for store in stores:
            prefix = "daemon" if store is self.daemon_store else store.path.stem
            rows = await store.read(
                lambda conn: query_audit(conn, agent=agent, kind=kind, since=since, limit=limit)
            )
            merged += [{**row, "id": f"{prefix}:{row['id']}"} for row in rows]
        merged.sort(key=lambda r: r["ts"])
        return merged[-limit:]

    async def audit_auth_failure(self, path: str, reason: str, client: str | None) -> None:
        await self.daemon_audit("auth", "denied", None, {"path": path, "reason": reason, "client": client})

    def platform_endpoint(self, path: str) -> Callable[[Any], Awaitable[Any]] | None:
        for entry in self.entries.values():
            for channel in entry.channels.values():
                if isinstance(channel, HttpChannel) and channel.http_path == path:
                    return channel.handle_http
        return None

    # -- lifecycle ----------------------------------------------------------------------------

    async def daemon_audit(self, kind: str, action: str, agent: str | None, data: dict[str, Any]) -> None:
        record = AuditRecord(kind, action, data=data)
        now = time.time()
        await self.daemon_store.write(lambda conn: insert_audit(conn, agent or "daemon", [record], now))

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def request_stop(self) -> None:
        self._signals += 1
        if self._signals == 1:
            log.info("stopping: draining in-flight runs (signal again to force)")
            self._stop.set()
        else:
            log.warning("second signal: exiting now")
            os._exit(1)

    async def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        await self.daemon_store.open()
        if not self.agents_dir.is_dir():
            raise OperatorError(
                f"agents folder {self.agents_dir} does not exist: create it and add <name>.yaml files"
            )
        await self.sync_agents()
        gc.freeze()
        self.spawn(self._watch())

    async def serve(self, install_signals: bool = True) -> None:
        """Run until a signal (or request_stop), then drain and close everything."""
        loop = asyncio.get_running_loop()
        if install_signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, self.request_stop)
        await self.start()
        config = uvicorn.Config(
            create_app(self),
            host=self.host,
            port=self.port,
            log_level="warning",
            lifespan="off",
            timeout_graceful_shutdown=30,
        )
        self.server = EmbeddedServer(config)
        server_task = self.spawn(self.server.serve())
        while not self.server.started and not server_task.done():  # noqa: ASYNC110 (uvicorn exposes a flag)
            await asyncio.sleep(0.01)
        if server_task.done():
            self._stop.set()
            await self.shutdown()
            exc = server_task.exception()
            raise OperatorError(f"cannot listen on {self.host}:{self.port}: {exc or 'address in use?'}")
        log.info("agentd listening on http://%s:%d (%d agents)", self.host, self.port, len(self.entries))
        print(
            f"agentd: listening on http://{self.host}:{self.port} with agents: {', '.join(sorted(self.entries))}",
            flush=True,
        )
        await self._stop.wait()
        # Stop intake first (HTTP finishes requests already in flight), then drain, then close.
        self.server.should_exit = True
        await server_task
        await self.shutdown()

    async def shutdown(self) -> None:
        for entry in list(self.entries.values()):
            await self._stop_channels(entry)
        for entry in list(self.entries.values()):
            if entry.runtime is not None:
                await entry.runtime.drain(timeout=30)
                await entry.runtime.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.daemon_store.close()
        await self.providers.aclose()
        self.executor.shutdown()

    # -- agents: load, reload, stop -------------------------------------------------------

    async def sync_agents(self) -> None:
        """Bring running agents in line with the files: start new, reload changed, stop deleted."""
        seen = set()
        for name, paths in agent_sources(self.agents_dir).items():
            seen.add(name)
            try:
                # every file naming the agent: adding x.yml beside x.yaml is a change (refused as a duplicate)
                fingerprint = tuple((st.st_mtime_ns, st.st_size) for st in (p.stat() for p in paths))
            except OSError:
                continue
            entry = self.entries.get(name)
            if entry is not None and entry.fingerprint == fingerprint:
                continue
            if entry is None:
                entry = self.entries[name] = AgentEntry(name, paths[0])
            entry.path, entry.fingerprint = paths[0], fingerprint
            await self._load(entry)
        for name in set(self.entries) - seen:
            await self._remove(self.entries.pop(name))

    async def _load(self, entry: AgentEntry) -> None:
        reloading = entry.runtime is not None
        try:
            spec = parse_agent(
                entry.path, default_model=self.settings.defaults.model, providers=self.providers.names()
            )
        except (ConfigError, OperatorError) as e:
            message = str(e)
            entry.last_error = message + (" (running the last good definition)" if reloading else "")
            log.error(
                "agent %s: config rejected%s:\n%s",
                entry.name,
                " (kept the last good one)" if reloading else "",
                message,
            )
            await self.daemon_audit(
                "config",
                "rejected",
                entry.name,
                {"file": str(entry.path), "error": message, "kept_previous": reloading},
            )
            return
        except OSError as e:
            entry.last_error = f"cannot read {entry.path}: {e}"
            log.error("agent %s: %s", entry.name, entry.last_error)
            return
        old = entry.spec
        entry.spec, entry.last_error = spec, None
        if entry.runtime is None:
            store = AgentStore(
                self.data_dir / f"{spec.name}.sqlite", self.executor, self.settings.store.synchronous
            )
            runtime = AgentRuntime(
                spec,
                store,
                self.providers,
                hot_conversations=self.settings.store.hot_conversations,
                embedder=self.embedder,
                memory_extractor_model=self.settings.memory_extractor_model,
            )
            runtime.peers = self.runtime
            try:
                await runtime.start()
            except AgentdError as e:
                entry.last_error = str(e)
                log.error("agent %s: cannot start: %s", entry.name, e)
                await self.daemon_audit("config", "failed", entry.name, {"error": str(e)})
                return
            entry.runtime = runtime
            await self.daemon_audit("config", "loaded", entry.name, {"file": str(entry.path)})
            log.info("agent %s: loaded (%s)", entry.name, spec.model.name)
        else:
            entry.runtime.update_spec(spec)
            await self.daemon_audit("config", "reloaded", entry.name, {"file": str(entry.path)})
            log.info("agent %s: reloaded", entry.name)
        if old is None or old.channels != spec.channels:
            await self._stop_channels(entry)
            self._start_channels(entry, spec)

    async def _remove(self, entry: AgentEntry) -> None:
        await self._stop_channels(entry)
        if entry.runtime is not None:
            await entry.runtime.drain(timeout=30)
            await entry.runtime.close()
        await self.daemon_audit("config", "removed", entry.name, {"file": str(entry.path)})
        log.info("agent %s: stopped (file removed)", entry.name)

    def _start_channels(self, entry: AgentEntry, spec: AgentSpec) -> None:
        host = AgentHost(self, entry)
        for kind in spec.channels.enabled():
            if kind not in CHANNEL_KINDS:
                continue  # webhook is served by the HTTP API itself
            try:
                channel = build_channel(kind, entry.name, getattr(spec.channels, kind))
            except Exception as e:
                host.set_status(kind, "failed", f"cannot start: {e}")
                continue
            entry.channels[kind] = channel
            host.set_status(kind, "starting")
            entry.channel_tasks[kind] = self.spawn(self._run_channel(host, kind, channel))

    async def _run_channel(self, host: AgentHost, kind: str, channel: Channel) -> None:
        try:
            await channel.run(host)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            # A channel that fails never stops the other channels or agents.
            host.set_status(kind, "failed", str(e) or type(e).__name__)
            log.exception("agent %s: channel %s stopped with an error", host.agent, kind)

    async def _stop_channels(self, entry: AgentEntry) -> None:
        for kind, channel in list(entry.channels.items()):
            task = entry.channel_tasks.pop(kind, None)
            try:
                await asyncio.wait_for(channel.stop(), CHANNEL_STOP_TIMEOUT)
            except Exception:
                log.exception("agent %s: channel %s did not stop cleanly", entry.name, kind)
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            entry.channel_status[kind] = ("stopped", None)
        entry.channels.clear()

    async def _prune_deliveries(self) -> None:
        """Forget platform delivery ids older than a week: redeliveries come within minutes."""
        cutoff = time.time() - DELIVERY_MEMORY_S
        for entry in list(self.entries.values()):
            if entry.runtime is not None and entry.runtime.status == "running":
                await entry.runtime.store.write(lambda conn: prune_events(conn, cutoff))

    async def _watch(self) -> None:
        last_freeze = last_prune = time.monotonic()
        while True:
            await asyncio.sleep(self.reload_interval)
            try:
                await self.sync_agents()
            except Exception:
                log.exception("reloading agents failed")
            if time.monotonic() - last_freeze > GC_FREEZE_EVERY:
                # Long-lived objects (hot transcripts, loaded specs) move out of the cyclic GC's
                # reach, so full collections stop walking them: without this the p95 of a turn on
                # a 10,000-message thread is several times its p50 (performance.md). Messages hold
                # no cycles, so refcounting still frees them when a thread is evicted.
                gc.freeze()
                last_freeze = time.monotonic()
            if time.monotonic() - last_prune > PRUNE_EVERY:
                last_prune = time.monotonic()
                try:
                    await self._prune_deliveries()
                except Exception:
                    log.exception("pruning old delivery ids failed")
