"""The composition root: the agents of a folder, their channels and the HTTP API, in one event loop.

The daemon is an async context manager. Entering opens the shared resources,
loads every agent and starts the periodic jobs in a task group; leaving is the
one teardown path: channels stop taking messages, in-flight runs drain, agents
close, background tasks end, resources close. `serve()` adds the HTTP server
and runs until a signal: the first drains, the second forces.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from types import TracebackType
from typing import Any

import uvicorn

from agentd.channels.base import HttpChannel
from agentd.clock import Clock, clock_from_environment
from agentd.config.http_store import is_loopback
from agentd.config.loader import parse_daemon
from agentd.config.models import DaemonSpec
from agentd.daemon.budgets import metering_for
from agentd.daemon.fleet import DRAIN_TIMEOUT, Fleet, log_startup
from agentd.daemon.job_metrics import JobMetrics
from agentd.daemon.metrics import Metrics
from agentd.daemon.observe import DaemonObserver
from agentd.daemon.people import attach_people, erase_linked, export_linked
from agentd.daemon.periodic import (
    CLOSE_IDLE_FILES_EVERY,
    GC_FREEZE_EVERY,
    PRUNE_EVERY,
    delivery_cutoff,
    every,
    freeze_gc,
)
from agentd.daemon.provider_checks import warn_unused_providers
from agentd.daemon.resources import _FROM_SETTINGS, DAEMON_STORE, Resources
from agentd.daemon.schedules import Schedules
from agentd.daemon.server import EmbeddedServer, bind, url
from agentd.daemon.stop_relay import relay_stops
from agentd.daemon.watcher import FolderWatcher
from agentd.engine.agent import Agent
from agentd.engine.breakers import Breakers
from agentd.engine.collector import collector_paused
from agentd.engine.linking import People
from agentd.engine.metering import Meter
from agentd.engine.upkeep import prune_deliveries, prune_media
from agentd.errors import OperatorError
from agentd.http.app import create_app
from agentd.http.auth_failures import FLUSH_EVERY as AUTH_FLUSH_EVERY
from agentd.http.auth_failures import AuthFailures
from agentd.providers.base import Embedder, ModelProvider
from agentd.store.base import Store
from agentd.store.folder_lock import DataFolderLock
from agentd.store.queries import AuditEvents
from agentd.store.records import AuditRecord
from agentd.store.writes import AppendAudit, Write

log = logging.getLogger("agentd")
READY_TIMEOUT_S = 2.0  # /readyz waits this long for the store to answer (probes time out at a few s)


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
        embedder: Embedder | None = _FROM_SETTINGS,
        providers: dict[str, ModelProvider] | None = None,
        breakers: Breakers | None = None,
        clock: Clock | None = None,
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
        # scheduled fires, budgets' days and rate buckets read it (tests give a ManualClock, or a FileClock
        # through AGENTD_TEST_CLOCK_FILE)
        self.clock: Clock = clock or clock_from_environment()
        self.metrics = Metrics(lambda: self.fleet.entries, lambda: self.resources.stats())
        self.resources = Resources(
            self.settings,
            data_dir,
            embedder=embedder,
            providers=providers,
            breakers=breakers,
            observer=DaemonObserver(self.metrics),
            clock=self.clock,
        )
        self.watcher = FolderWatcher(agents_dir)
        self.schedules = Schedules(self.resources, self.spawn, JobMetrics(self.metrics.registry))
        self.fleet = Fleet(self.resources, self.daemon_audit, self.spawn, self.schedules)
        self.daemon_store: Store | None = None
        self.server: EmbeddedServer | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._group: asyncio.TaskGroup | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stop = asyncio.Event()
        self.agents_loaded = False  # the first load of the agent files is done (readiness)
        self._signals = 0
        self._audit_batch: list[Write[Any]] | None = None  # while agents load: committed together
        self._folder_lock: DataFolderLock | None = None
        # refused token checks: counted, audited per source and minute (never before the 401)
        self.auth_failures = AuthFailures(lambda data: self.daemon_audit("auth", "denied", None, data))

    # -- lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> Daemon:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.shutdown()

    def _own_data_folder(self) -> None:
        """Take the data folder's lock before anything else: a second daemon on the same folder is
        refused here, having loaded, bound and written nothing. (Several daemons share a PostgreSQL
        store by design; only SQLite files need one owner.)"""
        if not self.agents_dir.is_dir():  # refused before anything is created
            raise OperatorError(
                f"agents folder {self.agents_dir} does not exist: create it and add <name>.yaml files"
            )
        if self._folder_lock is None and not self.resources.shared_store:
            lock = DataFolderLock(self.data_dir, self.agents_dir)
            lock.acquire()
            self._folder_lock = lock

    def _release_data_folder(self) -> None:
        if self._folder_lock is not None:
            self._folder_lock.release()
            self._folder_lock = None

    async def start(self) -> None:
        """Own the data folder, open the resources, load every agent, start the periodic jobs."""
        self._own_data_folder()
        stack = contextlib.AsyncExitStack()
        stack.callback(self._release_data_folder)
        try:
            await stack.enter_async_context(self.resources)
            self.daemon_store = self.resources.store(DAEMON_STORE)
            await self.daemon_store.open()
            self.resources.meter, self.resources.rate_limiter = metering_for(
                self.settings, self.daemon_store, self.metrics, self.clock
            )
            stack.push_async_callback(self.daemon_store.close)
            await attach_people(self.resources.people, self.daemon_store, self.settings.people, self.fleet)
            stack.push_async_callback(self.auth_failures.flush_all)  # before the store closes
            self._group = await stack.enter_async_context(asyncio.TaskGroup())
            stack.push_async_callback(self._cancel_tasks)
            stack.push_async_callback(self.fleet.close_all)
            stack.push_async_callback(self.schedules.close)  # (first: no fire starts while agents drain)
            # The first load builds every agent (10,000 at most starts): the cyclic collector would
            # walk that growing heap again and again (~40% of the load) and find nothing, since
            # loading leaves no cyclic garbage; so it stays off until the load is frozen out of reach.
            with collector_paused(freeze_after=True):
                await self.sync_agents()
            self.agents_loaded = True
            warn_unused_providers(self.settings, [e.spec for e in self.fleet.entries.values() if e.spec])
            self.spawn(every(self.reload_interval, self.sync_agents, "reloading agents"))
            if self.resources.shared_store:  # /stop asked on another daemon for a turn run here
                self.spawn(relay_stops(self.resources.stop_asks, self.agent))
            self.spawn(every(GC_FREEZE_EVERY, freeze_gc, "freezing the GC"))
            self.spawn(every(PRUNE_EVERY, self._prune, "pruning old delivery ids and episodes"))
            self.spawn(every(AUTH_FLUSH_EVERY, self.auth_failures.flush, "auditing refused token checks"))
            sweep = min(CLOSE_IDLE_FILES_EVERY, self.settings.store.close_idle_after_s / 2)
            self.spawn(every(sweep, self.resources.close_idle_files, "closing idle agent files"))
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack

    async def shutdown(self) -> None:
        """The one teardown: channels stop, runs drain, agents close, tasks end, resources close."""
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """A background task of the daemon: its failure is logged and never ends the daemon."""

        async def guarded() -> Any:
            try:
                return await coro
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("background task failed")
                return None

        if self._group is None:
            raise RuntimeError("the daemon is not started")
        task = self._group.create_task(guarded())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        # A task cancelled before its first step never awaits `coro`: close it, or Python warns at shutdown.
        task.add_done_callback(lambda _: coro.close())
        return task

    async def _cancel_tasks(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    def request_stop(self) -> None:
        self._signals += 1
        if self._signals == 1:
            log.info("stopping: draining in-flight runs (signal again to force)")
            self._stop.set()
        else:
            log.warning("second signal: exiting now")
            os._exit(1)

    async def serve(self, install_signals: bool = True) -> None:
        """Listen, start, run until a signal (or request_stop), then stop intake, drain and close."""
        self._own_data_folder()  # first of all: a second daemon on this folder stops here
        try:
            sock = bind(self.host, self.port)  # next: a busy port is refused before anything starts
        except BaseException:
            self._release_data_folder()
            raise
        self.port = sock.getsockname()[1]
        if self._folder_lock is not None:
            self._folder_lock.set_http_address(url(self.host, self.port))
        try:
            if install_signals:
                loop = asyncio.get_running_loop()
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.add_signal_handler(sig, self.request_stop)
            async with self:
                # log_config=None: uvicorn's records (its tracebacks too) go to agentd's handler, in the
                # chosen format, instead of uvicorn's own handlers writing raw text into the stream
                config = uvicorn.Config(
                    create_app(self),
                    log_level="warning",
                    log_config=None,
                    lifespan="off",
                    timeout_graceful_shutdown=int(DRAIN_TIMEOUT),  # the agents' drain, the same bound
                )
                self.server = EmbeddedServer(config)
                server_task = self.spawn(self.server.serve(sockets=[sock]))
                log_startup(url(self.host, self.port), self.fleet)
                await self._stop.wait()
                # Stop intake first (HTTP finishes requests already in flight), then drain, then close.
                self.server.should_exit = True
                await server_task
            # the last line: everything drained and closed (a supervisor's log shows the stop completed)
            log.info(
                "stopped: in-flight runs drained, every agent's data closed",
                extra={"data": {"pid": os.getpid()}},
            )
        finally:
            sock.close()

    # -- agents ---------------------------------------------------------------------------------

    async def sync_agents(self) -> None:
        """Bring running agents in line with the files: start new, reload changed, stop deleted."""
        changes = self.watcher.scan()
        # one commit for the audit rows of every agent loaded (10,000 at a start), not one each
        self._audit_batch = []
        try:
            for name, path in changes.changed.items():
                await self.fleet.load(name, path)
            for name in changes.removed:
                await self.fleet.remove(name)
        finally:
            batch, self._audit_batch = self._audit_batch, None
            if batch:
                assert self.daemon_store is not None
                await self.daemon_store.write(*batch)

    async def _prune(self) -> None:
        """Hourly: platform delivery ids past a week, episodes and files past their agent's retention."""
        now = time.time()
        for agent in self.fleet.running_agents():
            await prune_deliveries(agent, delivery_cutoff())
            await prune_media(agent, now)
            await agent.sweep_episodes(now)

    async def daemon_audit(self, kind: str, action: str, agent: str | None, data: dict[str, Any]) -> None:
        assert self.daemon_store is not None
        op = AppendAudit(agent or "daemon", [AuditRecord(kind, action, data=data)], time.time())
        if self._audit_batch is not None:
            self._audit_batch.append(op)
        else:
            await self.daemon_store.write(op)

    # -- AgentDirectory (for the HTTP layer) ------------------------------------------------------

    @property
    def daemon_id(self) -> str:
        return self.resources.daemon_id

    def agent(self, name: str) -> Agent | None:
        return self.fleet.agent(name)

    def agent_problem(self, name: str) -> str | None:
        return self.fleet.problem(name)

    def has_webhook(self, name: str) -> bool:
        agent = self.fleet.agent(name)
        return bool(agent and agent.spec.channels.webhook is not None)

    def describe_agents(self) -> list[dict[str, Any]]:
        return self.fleet.describe()

    async def readiness(self) -> str | None:
        """Why this daemon should not be sent traffic now (None: it should): GET /readyz."""
        if self._stop.is_set():
            return "stopping: draining in-flight runs"
        if not self.agents_loaded:
            return "still loading the agent files"
        problem = await self.resources.store_problem(READY_TIMEOUT_S)
        return None if problem is None else f"the store is unavailable: {problem}"

    def describe_daemon(self) -> dict[str, Any]:
        return {"agents": len(self.fleet.entries), **self.resources.stats()}

    def memory_models(self) -> dict[str, dict[str, Any]]:
        return self.resources.breakers.describe()

    def metrics_text(self) -> tuple[bytes, str]:
        return self.metrics.exposition()

    def usage_meter(self) -> Meter | None:
        return self.resources.meter

    async def query_audit(
        self, agent: str | None, kind: str | None, since: float | None, limit: int, tool: str | None = None
    ) -> list[dict[str, Any]]:
        assert self.daemon_store is not None
        if self.auth_failures.pending:
            await self.auth_failures.flush_all()  # what is read is never behind the refusals counted
        query = AuditEvents(agent, kind, since, limit, tool)
        # each event names its chain (the store it is in) and its place there: seq, prev_hash, hash
        merged = [
            {**r, "id": f"daemon:{r['id']}", "chain": DAEMON_STORE}
            for r in await self.daemon_store.read(query)
        ]
        for name, entry in self.fleet.entries.items():
            if entry.agent is not None and agent in (None, name):
                merged += [
                    {**r, "id": f"{name}:{r['id']}", "chain": name}
                    for r in await entry.agent.audit_events(kind, since, limit, tool)
                ]
        merged.sort(key=lambda r: r["ts"])
        return merged[-limit:]

    async def export_person(self, user_id: str) -> dict[str, Any]:
        """Everything held about one person, across every agent (agentd.daemon.people)."""
        return await export_linked(
            self.resources, self.fleet.agent, self.daemon_store, self.resources.people, user_id
        )

    async def erase_person(self, user_id: str, by: str) -> dict[str, Any]:
        """Erase one person everywhere, hot caches included (agentd.daemon.people)."""
        return await erase_linked(
            self.resources, self.fleet.agent, self.daemon_store, self.resources.people, user_id, by
        )

    @property
    def people(self) -> People:
        return self.resources.people

    def note_auth_failure(self, path: str, reason: str, client: str | None) -> None:
        self.auth_failures.note(path, reason, client)

    def platform_endpoint(self, path: str) -> Callable[[Any], Awaitable[Any]] | None:
        for entry in self.fleet.entries.values():
            for channel in entry.channels.channels.values() if entry.channels else ():
                if isinstance(channel, HttpChannel) and channel.http_path == path:
                    return channel.handle_http
        return None
