"""An agent's chat channels: the host each channel gets, and starting and stopping them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from agentd.channels.base import Channel
from agentd.channels.registry import CHANNEL_KINDS, build_channel
from agentd.config.models import AgentSpec
from agentd.engine.agent import Agent
from agentd.errors import StoreError
from agentd.events import USER_ID_FORM, InboundEvent, Reply, ReplySink, is_user_id
from agentd.store.base import Leases

log = logging.getLogger("agentd")
CHANNEL_STOP_TIMEOUT = 5.0
Spawn = Callable[[Coroutine[Any, Any, Any]], "asyncio.Task[Any]"]


class HasAgent(Protocol):
    name: str
    agent: Agent | None


class AgentHost:
    """The ChannelHost a channel of one agent gets: dispatch, audit, status, nothing more."""

    def __init__(self, owner: HasAgent, spawn: Spawn):
        self._owner = owner
        self._spawn = spawn
        self.agent = owner.name
        self.statuses: dict[str, tuple[str, str | None]] = {}

    async def dispatch(self, event: InboundEvent, sink: ReplySink | None = None) -> Reply:
        agent = self._owner.agent
        if agent is None or agent.status != "running":
            raise RuntimeError(f"agent {self.agent} is not running")
        if event.user_id is not None and not is_user_id(event.user_id):
            # a person whose id the people routes refuse could not be erased: never taken in
            log.warning(
                "agent %s: %s: refused user id %r (%s)",
                self.agent,
                event.channel,
                event.user_id,
                USER_ID_FORM,
            )
            return Reply(
                text="Sorry, I cannot take in messages from this account: its id is not one I can keep.",
                conversation_key=event.conversation_key,
                error="bad_user_id",
            )
        try:
            return await agent.handle(event, sink=sink)
        except StoreError as e:
            # the person gets an answer (HTTP gets a 503); nothing of the message was kept
            log.error("agent %s: %s: %s", self.agent, event.conversation_key, e)
            return Reply(
                text="Sorry, I cannot reach my memory just now, so I did not take in your message: "
                "please send it again in a moment.",
                conversation_key=event.conversation_key,
                error="store_unavailable",
            )

    async def audit(
        self,
        kind: str,
        action: str,
        *,
        conversation_key: str | None = None,
        data: dict[str, Any] | None = None,
    ) -> None:
        if self._owner.agent is not None:
            await self._owner.agent.audit(kind, action, conversation_key=conversation_key, data=data)

    def set_status(self, channel: str, status: str, error: str | None = None) -> None:
        previous = self.statuses.get(channel)
        self.statuses[channel] = (status, error)
        if previous == (status, error):
            return
        if status == "failed":
            log.error("agent %s: channel %s failed: %s", self.agent, channel, error)
            if self._owner.agent is not None:
                self._spawn(self.audit("channel", "failed", data={"channel": channel, "error": error}))
        else:
            log.info("agent %s: channel %s %s%s", self.agent, channel, status, f" ({error})" if error else "")


class AgentChannels:
    """The running chat channels of one agent (the webhook is served by the HTTP API itself).

    A channel the platform allows once per bot (`Channel.exclusive`) runs only while this daemon
    holds its lease; the others stand by and take over when the holder stops renewing it.
    """

    def __init__(self, host: AgentHost, spawn: Spawn, leases: Leases, daemon_id: str, lease_s: float):
        self.host = host
        self._spawn = spawn
        self._leases = leases
        self._daemon_id = daemon_id
        self._lease_s = lease_s
        self.channels: dict[str, Channel] = {}
        self.holders: dict[str, str | None] = {}  # channel -> the daemon holding its lease, as last seen
        self._tasks: dict[str, asyncio.Task[Any]] = {}

    def start(self, spec: AgentSpec) -> None:
        for kind in spec.channels.enabled():
            if kind not in CHANNEL_KINDS:
                continue
            try:
                channel = build_channel(kind, self.host.agent, getattr(spec.channels, kind))
            except Exception as e:
                self.host.set_status(kind, "failed", f"cannot start: {e}")
                continue
            self.channels[kind] = channel
            self.host.set_status(kind, "starting")
            config = getattr(spec.channels, kind)
            run = self._held(kind, channel, config) if channel.exclusive else self._run(kind, channel)
            self._tasks[kind] = self._spawn(run)

    async def _held(self, kind: str, channel: Channel, config: Any) -> None:
        """Run the channel while holding its lease: stand by until it is ours, stop if it is lost
        (a fresh connection each time it is taken again)."""
        name, renew_every = f"channel:{self.host.agent}:{kind}", self._lease_s / 3
        stopped = False  # a channel once stopped does not run again: a new one is built
        while True:
            token = await self._leases.acquire(name, self._daemon_id, self._lease_s)
            if token is None:
                self.holders[kind] = await self._leases.holder(name)
                self.host.set_status(kind, "standby", f"held by {self.holders[kind]}")
                await asyncio.sleep(renew_every)
                continue
            if stopped:
                channel = self.channels[kind] = build_channel(kind, self.host.agent, config)
                stopped = False
            self.holders[kind] = self._daemon_id
            running = asyncio.ensure_future(self._run(kind, channel))
            try:
                while not running.done():
                    await asyncio.wait({running}, timeout=renew_every)
                    if not running.done() and not await self._leases.renew(
                        name, self._daemon_id, token, self._lease_s
                    ):
                        log.warning(
                            "agent %s: lost the lease of channel %s; standing by", self.host.agent, kind
                        )
                        await channel.stop()
                        stopped = True
                        break
                if running.done():
                    return  # stopped (or failed): nothing more to hold
            finally:
                if not running.done():
                    running.cancel()
                await self._leases.release(name, self._daemon_id, token)

    async def _run(self, kind: str, channel: Channel) -> None:
        try:
            await channel.run(self.host)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            # A channel that fails never stops the other channels or agents.
            self.host.set_status(kind, "failed", str(e) or type(e).__name__)
            log.exception("agent %s: channel %s stopped with an error", self.host.agent, kind)

    async def stop(self) -> None:
        for kind, channel in list(self.channels.items()):
            task = self._tasks.pop(kind, None)
            try:
                await asyncio.wait_for(channel.stop(), CHANNEL_STOP_TIMEOUT)
            except Exception:
                log.exception("agent %s: channel %s did not stop cleanly", self.host.agent, kind)
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            self.host.statuses[kind] = ("stopped", None)
        self.channels.clear()
