"""Which Slack messages the agent answers, in which conversation, and where the reply goes: pure functions."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from agentd.channels.chat import Route

# Message subtypes that are still a person talking; every other subtype (edits,
# deletions, joins, bot_message ...) is ignored.
_PERSON_SUBTYPES = frozenset({None, "file_share", "thread_broadcast"})


@dataclass(frozen=True, slots=True)
class SlackTarget:
    """Where a reply is posted: a conversation, and the thread in it (None: top level)."""

    channel: str
    thread_ts: str | None


def route_message(
    event: dict[str, Any],
    *,
    bot_user_id: str | None,
    respond_to: str,
    threads: bool,
    per_user: bool,
    team: str | None = None,
) -> Route[SlackTarget] | None:
    """The route of a `message` or `app_mention` event, or None when we do not answer it."""
    kind = event.get("type")
    if kind not in ("message", "app_mention"):
        return None
    if event.get("subtype") not in _PERSON_SUBTYPES or event.get("bot_id") or event.get("bot_profile"):
        return None
    user, channel, ts = _string(event.get("user")), _string(event.get("channel")), _string(event.get("ts"))
    if user is None or channel is None or ts is None or user == bot_user_id:
        return None
    # app_mention carries no channel_type; DM conversation ids start with D.
    is_dm = event.get("channel_type") == "im" or (kind == "app_mention" and channel.startswith("D"))
    if (
        kind == "message"
        and not is_dm
        and respond_to == "mentions"
        and not _shares_files_naming(event, bot_user_id)
    ):
        return None  # in channels, a mention arrives as its own app_mention event
    in_thread = _string(event.get("thread_ts"))
    if is_dm:
        # A DM is one person's conversation; only an explicit thread splits it further.
        thread = in_thread if threads else None
        key, reply_to = f"slack:{channel}" + (f":{thread}" if thread else ""), in_thread
    elif threads:
        thread = in_thread or ts  # a top-level message starts a thread of its own
        key, reply_to = f"slack:{channel}:{thread}", thread
    else:
        thread, reply_to, key = None, in_thread, f"slack:{channel}"
    if per_user and not is_dm:
        key += f":user:{user}"
    return Route(
        conversation_key=key,
        text=strip_mention(_string(event.get("text")) or "", bot_user_id),
        user_id=user,
        event_id=f"{channel}:{ts}",  # the same for a message's `message` and `app_mention` events
        target=SlackTarget(channel, reply_to),
        place=channel,
        where={"slack_channel": channel, "thread_ts": reply_to},
        metadata={"team": team or event.get("team"), "channel": channel, "ts": ts, "thread_ts": thread},
        sent_at=_epoch(ts),
    )


def _shares_files_naming(event: dict[str, Any], bot_user_id: str | None) -> bool:
    """A message that shares files and names the bot: Slack at times sends it with no app_mention
    (slackapi/bolt-python#925), so it is taken as the mention it is (the ids de-duplicate the two)."""
    text = _string(event.get("text")) or ""
    return bool(event.get("files")) and bot_user_id is not None and f"<@{bot_user_id}" in text


def target_of(conversation_key: str) -> SlackTarget | None:
    """Where a message into a conversation goes, read off its key (`slack:<channel>[:<thread>][:user:<id>]`)."""
    kind, _, rest = conversation_key.partition(":")
    rest = rest.split(":user:")[0]
    channel, _, thread = rest.partition(":")
    if kind != "slack" or not channel:
        return None
    return SlackTarget(channel, thread or None)


def strip_mention(text: str, bot_user_id: str | None) -> str:
    """Remove `<@BOTID>` (or `<@BOTID|name>`) wherever it is, so "@bot /status" reads "/status"."""
    if not bot_user_id:
        return text.strip()
    return re.sub(rf"<@{re.escape(bot_user_id)}(?:\|[^>]*)?>", "", text).strip()


def _string(value: Any) -> str | None:
    """A non-empty string, as Slack's ids and texts are; None for anything else (absent or malformed)."""
    return value if isinstance(value, str) and value else None


def _epoch(ts: str) -> float | None:
    """A Slack ts ("1700000000.000100") as epoch seconds; None when it is not one."""
    try:
        return float(ts)
    except ValueError:
        return None
