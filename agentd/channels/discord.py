"""The Discord channel: discord.py's gateway client feeding one agent.

A message is matched cheaply first (not a bot, addressed to us, allowed), then
handled: dispatched to the agent while a typing indicator shows, and the reply
sent back in the same channel, thread or DM, split at Discord's 2000 characters.

Reconnects: discord.py resumes a dropped gateway by itself; if the client stops
anyway (login over REST failed for a network reason, gateway refused), `run`
builds a fresh client after a backoff. A refused token or a missing privileged
intent is the operator's to fix: the channel is marked failed and `run` raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import secrets
from collections.abc import Iterator, Sequence
from typing import Any

import aiohttp
import discord
import yarl

from agentd.channels.common import backoff_delays, split_message
from agentd.config.discord import DiscordSpec
from agentd.errors import OperatorError
from agentd.events import ChannelHost, InboundEvent, Reply

log = logging.getLogger(__name__)

CHANNEL = "discord"
MESSAGE_LIMIT = 2000
TYPING_REFRESH = 8.0  # Discord shows "typing" for 10 s after each call
# Gateway close codes that no reconnect can cure: bad token, bad shard, bad version, bad intents.
FATAL_CLOSE_CODES = {4004: "Discord refused the token", 4010: "invalid shard", 4011: "sharding required"}
FATAL_CLOSE_CODES |= {4012: "invalid gateway version", 4013: "invalid intents"}
# Send failures worth another try; 429s are retried inside discord.py, honouring retry_after.
TRANSIENT_SEND_ERRORS = (discord.DiscordServerError, aiohttp.ClientError, asyncio.TimeoutError, OSError)
ANSWERED_TYPES = (discord.MessageType.default, discord.MessageType.reply)


class DiscordRefused(OperatorError):
    """Discord refused this bot (bad token, missing intent): only the operator can fix it."""


class DiscordChannel:
    name = CHANNEL

    def __init__(
        self,
        agent: str,
        spec: DiscordSpec,
        *,
        guild_ready_timeout: float = 2.0,
        heartbeat_timeout: float = 60.0,
        send_retry_delays: Sequence[float] = (1.0, 2.0, 4.0),
        reconnect_backoff: tuple[float, float] = (1.0, 60.0),
        drain_timeout: float = 3.0,
    ):
        self.agent = agent
        self.spec = spec
        self._guild_ready_timeout = guild_ready_timeout
        self._heartbeat_timeout = heartbeat_timeout
        self._send_retry_delays = tuple(send_retry_delays)
        self._reconnect_backoff = reconnect_backoff
        self._drain_timeout = drain_timeout
        self._host: ChannelHost | None = None
        self._client: discord.Client | None = None
        self._handlers: set[asyncio.Task[Any]] = set()
        self._stopping = asyncio.Event()
        self._was_ready = False

    # ---- lifecycle -----------------------------------------------------------------------------

    async def run(self, host: ChannelHost) -> None:
        self._host = host
        _redirect(self.spec)
        host.set_status(CHANNEL, "starting")
        delays = self._fresh_backoff()
        try:
            while not self._stopping.is_set():
                client = self._client = self._build_client()
                try:
                    await client.start(self.spec.token, reconnect=True)
                except Exception as exc:
                    refusal = _refusal(exc)
                    if refusal is not None:
                        host.set_status(CHANNEL, "failed", refusal)
                        log.error("discord channel of %s failed: %s", self.agent, refusal)
                        raise DiscordRefused(f"discord channel of agent {self.agent}: {refusal}") from exc
                    log.warning("discord client of %s stopped (%s: %s)", self.agent, type(exc).__name__, exc)
                finally:
                    await _close_quietly(client)
                if self._stopping.is_set():
                    break
                if self._was_ready:  # it had been up: start the backoff over
                    self._was_ready = False
                    delays = self._fresh_backoff()
                host.set_status(CHANNEL, "reconnecting")
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), next(delays))
        finally:
            if self._stopping.is_set():
                host.set_status(CHANNEL, "stopped")

    async def stop(self) -> None:
        """Stop intake, give in-flight replies `drain_timeout` to go out, then close the client."""
        self._stopping.set()
        if self._handlers:
            await asyncio.wait(set(self._handlers), timeout=self._drain_timeout)
        if self._client is not None:
            await _close_quietly(self._client)
        for task in list(self._handlers):
            task.cancel()
        if self._handlers:
            await asyncio.wait(set(self._handlers), timeout=1.0)

    def _fresh_backoff(self) -> Iterator[float]:
        base, cap = self._reconnect_backoff
        return backoff_delays(base, cap)

    def _build_client(self) -> discord.Client:
        intents = discord.Intents.default()
        intents.message_content = True  # privileged: must also be enabled in the developer portal
        return _AgentClient(
            self,
            intents=intents,
            guild_ready_timeout=self._guild_ready_timeout,
            heartbeat_timeout=self._heartbeat_timeout,
            # An agent's text must never ping @everyone, roles or people.
            allowed_mentions=discord.AllowedMentions.none(),
            # A 429 asking for a longer wait than this fails the send instead of stalling the turn.
            max_ratelimit_timeout=60.0,
        )

    # ---- gateway events ------------------------------------------------------------------------

    def _on_ready(self) -> None:
        self._was_ready = True
        if self._host is not None and not self._stopping.is_set():
            self._host.set_status(CHANNEL, "running")

    def _on_disconnect(self) -> None:
        if self._host is not None and not self._stopping.is_set():
            self._host.set_status(CHANNEL, "reconnecting")

    async def _on_message(self, client: discord.Client, message: discord.Message) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            await self._handle(client, message)
        except Exception:
            # One bad message must never take the channel down.
            log.exception("discord: handling message %s in %s failed", message.id, message.channel.id)
        finally:
            if task is not None:
                self._handlers.discard(task)

    # ---- match, then handle --------------------------------------------------------------------

    def _text_to_answer(self, me: discord.ClientUser, message: discord.Message) -> str | None:
        """The text to dispatch, or None when this message is not for us."""
        if message.author.bot or message.author.id == me.id or message.type not in ANSWERED_TYPES:
            return None
        addressed = any(user.id == me.id for user in message.mentions)
        if message.guild is not None and self.spec.respond_to == "mentions" and not addressed:
            return None
        text = strip_mention(message.content, me.id)
        return text or None

    def _denial(self, message: discord.Message) -> str | None:
        user_id = str(message.author.id)
        if self.spec.allowed_users and user_id not in self.spec.allowed_users:
            return "user not in allowed_users"
        if self.spec.allowed_guilds:
            if message.guild is None and not self.spec.allowed_users:
                return "direct messages are closed when allowed_guilds is set and allowed_users is empty"
            if message.guild is not None and str(message.guild.id) not in self.spec.allowed_guilds:
                return "guild not in allowed_guilds"
        return None

    async def _handle(self, client: discord.Client, message: discord.Message) -> None:
        host, me = self._host, client.user
        if host is None or me is None or self._stopping.is_set():
            return
        text = self._text_to_answer(me, message)
        if text is None:
            return
        key = conversation_key(message, per_user=self.spec.per_user)
        denial = self._denial(message)
        if denial is not None:
            log.info("discord: denied %s in %s: %s", message.author.id, key, denial)
            data: dict[str, Any] = {"channel": CHANNEL, "user_id": str(message.author.id), "reason": denial}
            data["guild_id"] = None if message.guild is None else str(message.guild.id)
            await host.audit("permission", "denied", conversation_key=key, data=data)
            return
        event = InboundEvent(
            agent=self.agent,
            conversation_key=key,
            text=text,
            channel=CHANNEL,
            user_id=str(message.author.id),
            event_id=str(message.id),
            metadata=_metadata(message),
        )
        typing = asyncio.create_task(_keep_typing(message.channel))
        try:
            reply = await host.dispatch(event)
        finally:
            typing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await typing
        if reply.duplicate or not reply.text.strip():
            return
        await self._send_reply(host, message, reply)

    # ---- sending -------------------------------------------------------------------------------

    async def _send_reply(self, host: ChannelHost, message: discord.Message, reply: Reply) -> None:
        chunks = split_message(reply.text, MESSAGE_LIMIT)
        for index, chunk in enumerate(chunks):
            # The first chunk answers the message in busy server channels; DMs need no pointer.
            reference = None
            if index == 0 and message.guild is not None:
                reference = message.to_reference(fail_if_not_exists=False)
            try:
                await self._send_chunk(message.channel, chunk, reference)
            except Exception as exc:
                log.error(
                    "discord: reply to %s in %s not delivered: %s", message.id, reply.conversation_key, exc
                )
                data = {
                    "channel": CHANNEL,
                    "channel_id": str(message.channel.id),
                    "message_id": str(message.id),
                    "run_id": reply.run_id,
                    "chunk": index + 1,
                    "chunks": len(chunks),
                    "error": f"{type(exc).__name__}: {exc}",
                }
                await host.audit("channel", "send_failed", conversation_key=reply.conversation_key, data=data)
                return

    async def _send_chunk(
        self, channel: Any, chunk: str, reference: discord.MessageReference | None
    ) -> discord.Message:
        # One nonce for every try: Discord drops a repeat (enforce_nonce), so a send whose answer
        # was lost is not posted twice when we retry it.
        nonce = secrets.randbits(63)
        for attempt, delay in enumerate((0.0, *self._send_retry_delays)):
            if delay:
                await asyncio.sleep(delay)
            try:
                sent: discord.Message = await channel.send(chunk, reference=reference, nonce=nonce)
                return sent
            except TRANSIENT_SEND_ERRORS as exc:
                if attempt == len(self._send_retry_delays):
                    raise
                log.warning("discord: send to %s failed (%s), retrying", channel.id, exc)
        raise AssertionError("unreachable")


class _AgentClient(discord.Client):
    """discord.py calls `on_*` methods by name; these hand each event to the channel."""

    def __init__(self, channel: DiscordChannel, **options: Any):
        super().__init__(**options)
        self._agent_channel = channel

    async def on_ready(self) -> None:
        self._agent_channel._on_ready()

    async def on_resumed(self) -> None:
        self._agent_channel._on_ready()

    async def on_disconnect(self) -> None:
        self._agent_channel._on_disconnect()

    async def on_message(self, message: discord.Message) -> None:
        await self._agent_channel._on_message(self, message)


def conversation_key(message: discord.Message, *, per_user: bool) -> str:
    """`discord:<channel or thread id>` (+ `:user:<id>` with per_user), `discord:dm:<user id>` for DMs."""
    if message.guild is None:
        return f"discord:dm:{message.author.id}"
    key = f"discord:{message.channel.id}"
    return f"{key}:user:{message.author.id}" if per_user else key


def strip_mention(content: str, user_id: int) -> str:
    """The text without `<@id>` / `<@!id>` mentions of the bot."""
    return re.sub(rf"<@!?{user_id}>", "", content).strip()


def _metadata(message: discord.Message) -> dict[str, Any]:
    channel = message.channel
    data: dict[str, Any] = {
        "guild_id": None if message.guild is None else str(message.guild.id),
        "channel_id": str(channel.id),
        "message_id": str(message.id),
        "is_dm": message.guild is None,
        "author_name": message.author.display_name,
    }
    if isinstance(channel, discord.Thread):
        data["thread_id"] = str(channel.id)
        data["parent_channel_id"] = str(channel.parent_id)
    return data


async def _keep_typing(channel: Any) -> None:
    """Show "typing" until cancelled; a failed typing call never holds up the reply."""
    while True:
        try:
            await channel.typing()
        except Exception as exc:
            log.debug("discord: typing in %s failed: %s", channel.id, exc)
        await asyncio.sleep(TYPING_REFRESH)


def _refusal(exc: BaseException) -> str | None:
    """Why Discord will never accept this bot as configured, or None if retrying may help."""
    if isinstance(exc, discord.LoginFailure):
        return "Discord refused the token (401): check channels.discord.token"
    if isinstance(exc, discord.PrivilegedIntentsRequired):
        return "enable the Message Content intent for this bot in the Discord developer portal"
    if isinstance(exc, discord.ConnectionClosed) and exc.code in FATAL_CLOSE_CODES:
        return f"gateway closed the connection with {exc.code}: {FATAL_CLOSE_CODES[exc.code]}"
    return None


def _redirect(spec: DiscordSpec) -> None:
    # discord.py keeps these on classes (process-wide); touch them only when configured.
    if spec.api_base_url:
        discord.http.Route.BASE = spec.api_base_url.rstrip("/")
    if spec.gateway_url:
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(spec.gateway_url)


async def _close_quietly(client: discord.Client) -> None:
    if client.is_closed():
        return
    try:
        await asyncio.wait_for(client.close(), timeout=5.0)
    except Exception as exc:
        log.warning("discord: closing the client failed: %s", exc)
