"""The Discord channel: discord.py's gateway client feeding one agent.

A message is matched cheaply first (not a bot, addressed to us), then handled
by the chat base: the allow-lists, dispatch to the agent while a typing
indicator shows, and the reply sent back in the same channel, thread or DM,
split at Discord's 2000 characters (with `stream: true`, posted at its first
text and edited as it grows: Discord allows about 5 edits per 5 s in a channel).

Reconnects: discord.py resumes a dropped gateway by itself; if the client stops
anyway (login over REST failed for a network reason, gateway refused), `run`
builds a fresh client after a backoff. A refused token or a missing privileged
intent is the operator's to fix: the channel is marked failed and `run` raises.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import secrets
from collections.abc import Iterator, Sequence
from typing import Any

import aiohttp
import discord
import yarl

from agentd.backoff import backoff_delays
from agentd.channels.chat import AllowList, ChatChannel, Route
from agentd.channels.discord_files import attachments_of, send_file
from agentd.channels.splitting import split_message
from agentd.config.discord import DiscordSpec
from agentd.errors import OperatorError
from agentd.events import ChannelHost, OutgoingFile

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


class DiscordChannel(ChatChannel[discord.Message, discord.Message]):
    """One agent's Discord bot; a reply's target is the message it answers."""

    name = CHANNEL
    message_limit = MESSAGE_LIMIT
    typing_every = TYPING_REFRESH

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
        super().__init__(agent, AllowList(spec.allowed_users, spec.allowed_guilds, "guild"))
        self.spec = spec
        self._guild_ready_timeout = guild_ready_timeout
        self._heartbeat_timeout = heartbeat_timeout
        self._send_retry_delays = tuple(send_retry_delays)
        self._reconnect_backoff = reconnect_backoff
        self.drain_seconds = drain_timeout
        self.stream_every = spec.stream_edit_seconds if spec.stream else None
        self._client: discord.Client | None = None
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
                await self._pause(next(delays))
        finally:
            if self._stopping.is_set():
                host.set_status(CHANNEL, "stopped")

    async def stop(self) -> None:
        """Stop intake, give in-flight replies `drain_seconds` to go out, then close the client."""
        self._stopping.set()
        await self.drain()
        if self._client is not None:
            await _close_quietly(self._client)

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
        if not self._stopping.is_set():
            self._status("running")

    def _on_disconnect(self) -> None:
        if not self._stopping.is_set():
            self._status("reconnecting")

    def _on_message(self, message: discord.Message) -> None:
        if not self._stopping.is_set():  # intake stops first; replies in flight still go out
            self.receive(message)

    # ---- the chat base's platform part ---------------------------------------------------------

    def match(self, raw: discord.Message) -> Route[discord.Message] | None:
        me = self._client.user if self._client is not None else None
        if me is None:
            return None
        text = self._text_to_answer(me, raw)
        if text is None:
            return None
        guild_id = None if raw.guild is None else str(raw.guild.id)
        return Route(
            conversation_key=conversation_key(raw, per_user=self.spec.per_user),
            text=text,
            user_id=str(raw.author.id),
            event_id=str(raw.id),
            target=raw,
            place=guild_id,
            where={"guild_id": guild_id, "channel_id": str(raw.channel.id), "message_id": str(raw.id)},
            metadata=_metadata(raw),
            sent_at=raw.created_at.timestamp(),
            attachments=attachments_of(raw),
        )

    def _text_to_answer(self, me: discord.ClientUser, message: discord.Message) -> str | None:
        """The text to dispatch, or None when this message is not for us."""
        if message.author.bot or message.author.id == me.id or message.type not in ANSWERED_TYPES:
            return None
        addressed = any(user.id == me.id for user in message.mentions)
        if message.guild is not None and self.spec.respond_to == "mentions" and not addressed:
            return None
        text = strip_mention(message.content, me.id)
        return text if text or message.attachments else None  # a photo alone is a message too

    async def send_chunk(self, target: discord.Message, text: str, part: int) -> discord.Message:
        # The first chunk answers the message in busy server channels; DMs need no pointer.
        reference = None
        if part == 1 and target.guild is not None:
            reference = target.to_reference(fail_if_not_exists=False)
        # The nonce names this chunk of this reply, so a retry of a send whose answer was lost
        # is dropped by Discord (enforce_nonce) instead of posted twice.
        channel: Any = target.channel  # discord.py accepts reference=None; its annotations do not say so
        sent: discord.Message = await channel.send(text, reference=reference, nonce=f"{target.id}:{part}")
        return sent

    async def send_file(self, target: discord.Message, file: OutgoingFile, part: int) -> discord.Message:
        return await send_file(target, file, nonce=f"{target.id}:{part}")  # the nonce: as send_chunk's

    async def edit_chunk(self, target: discord.Message, sent: discord.Message, text: str) -> None:
        await sent.edit(content=text)

    async def delete_chunk(self, target: discord.Message, sent: discord.Message) -> None:
        await sent.delete()

    async def show_typing(self, target: discord.Message) -> None:
        await target.channel.typing()

    async def post(self, conversation_key: str, text: str) -> bool:
        """Post outside a reply (a resumed run, a tool server's question): into the channel or thread
        the key names, or the DM of the user it names (opened over REST when not cached)."""
        client = self._client
        where = _posting_place(conversation_key)
        if client is None or client.user is None or where is None:
            return False
        kind, snowflake = where
        if kind == "dm":
            messageable: Any = await self.retrying(lambda: client.create_dm(discord.Object(snowflake)))
        else:
            messageable = client.get_partial_messageable(snowflake)
        # one nonce per post, numbered by part: a retried send whose answer was lost is not posted twice
        batch = secrets.token_hex(6)
        for part, chunk in enumerate(split_message(text, self.message_limit), start=1):
            send = functools.partial(messageable.send, chunk, nonce=f"{batch}:{part}")
            await self.retrying(send)
        return True

    def is_transient(self, exc: Exception) -> bool:
        return isinstance(exc, TRANSIENT_SEND_ERRORS)

    def send_retry_delays(self) -> Sequence[float]:
        return self._send_retry_delays


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
        self._agent_channel._on_message(message)


def conversation_key(message: discord.Message, *, per_user: bool) -> str:
    """`discord:<channel or thread id>` (+ `:user:<id>` with per_user), `discord:dm:<user id>` for DMs."""
    if message.guild is None:
        return f"discord:dm:{message.author.id}"
    key = f"discord:{message.channel.id}"
    return f"{key}:user:{message.author.id}" if per_user else key


def _posting_place(conversation_key: str) -> tuple[str, int] | None:
    """("dm", user id) or ("channel", channel or thread id) from a key conversation_key made."""
    parts = conversation_key.split(":")
    if len(parts) >= 3 and parts[:2] == [CHANNEL, "dm"] and parts[2].isdigit():
        return "dm", int(parts[2])
    if len(parts) >= 2 and parts[0] == CHANNEL and parts[1].isdigit():
        return "channel", int(parts[1])
    return None


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
