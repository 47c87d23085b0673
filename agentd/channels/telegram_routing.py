"""Which Telegram messages the bot answers, in which conversation, and where the reply goes: pure functions."""

from __future__ import annotations

import re
from dataclasses import dataclass

from telegram import Message, MessageEntity, Update
from telegram.constants import ChatType

from agentd.channels.chat import Route
from agentd.events import Attachment

_COMMAND_RE = re.compile(r"^/([A-Za-z0-9_]+)(?:@([A-Za-z0-9_]+))?")


@dataclass(frozen=True, slots=True)
class Bot:
    """Who the bot is, as getMe answered: what a mention or a reply to it looks like."""

    id: int
    username: str


@dataclass(frozen=True, slots=True)
class TelegramTarget:
    """Where a reply goes: a chat, and the forum topic in it (None: the chat itself)."""

    chat_id: int
    thread_id: int | None


def route_update(
    update: Update, *, bot: Bot, respond_to: str, per_user: bool, files: tuple[Attachment, ...] = ()
) -> Route[TelegramTarget] | None:
    """The route of a message update (its text, or its `files` with their caption), or None when it is
    not for this bot."""
    message = update.message
    if (
        message is None
        or not (isinstance(message.text, str) or files)
        or message.from_user is None
        or message.chat is None
    ):
        return None  # neither text nor a file (or, from a webhook, a malformed message)
    text = addressed_text(message, bot, respond_to, has_files=bool(files))
    if text is None:
        return None
    chat_id = message.chat.id
    thread_id = message.message_thread_id if message.is_topic_message else None
    key = f"telegram:{chat_id}"
    if thread_id is not None:
        key += f":topic:{thread_id}"
    if per_user and message.chat.type != ChatType.PRIVATE:
        key += f":user:{message.from_user.id}"  # private chats are per person already
    return Route(
        conversation_key=key,
        text=text,
        user_id=str(message.from_user.id),
        event_id=f"{chat_id}:{message.message_id}",
        target=TelegramTarget(chat_id, thread_id),
        place=str(chat_id),
        where={"chat_id": str(chat_id)},
        metadata={"chat_id": chat_id, "message_id": message.message_id, "topic": thread_id},
        sent_at=message.date.timestamp() if message.date else None,
        attachments=files,
    )


def target_of(conversation_key: str) -> TelegramTarget | None:
    """Where a message into a conversation goes, read off its key
    (`telegram:<chat id>[:topic:<id>][:user:<id>]`)."""
    match = re.match(r"^telegram:(-?\d+)(?::topic:(\d+))?(?::user:\S+)?$", conversation_key)
    if match is None:
        return None
    return TelegramTarget(int(match.group(1)), int(match.group(2)) if match.group(2) else None)


def addressed_text(message: Message, bot: Bot, respond_to: str, *, has_files: bool = False) -> str | None:
    """The text (or a file's caption) meant for this bot, mention and @botname stripped; None if the
    message is not for us. A message with files is for us without any text."""
    text = message.text if message.text is not None else message.caption or ""
    command = _COMMAND_RE.match(text) if _starts_with_command(message) else None
    if command and command.group(2) and command.group(2).lower() != bot.username.lower():
        return None  # /cmd@otherbot
    in_group = message.chat.type != ChatType.PRIVATE
    if in_group and respond_to == "mentions":
        if not (command or _mentions_bot(message, bot) or _replies_to_bot(message, bot)):
            return None
    cleaned = _strip_bot_name(text, bot)
    return cleaned if cleaned or has_files else None


def _mentions_bot(message: Message, bot: Bot) -> bool:
    me = "@" + bot.username.lower()
    kinds: list[str | None] = [MessageEntity.MENTION, MessageEntity.TEXT_MENTION]
    found = (
        message.parse_entities(kinds) if message.text is not None else message.parse_caption_entities(kinds)
    )
    for entity, value in found.items():
        if entity.type == MessageEntity.MENTION and value.lower() == me:
            return True
        if entity.type == MessageEntity.TEXT_MENTION and entity.user and entity.user.id == bot.id:
            return True
    return False


def _replies_to_bot(message: Message, bot: Bot) -> bool:
    original = message.reply_to_message
    if original is None or original.from_user is None:
        return False
    if original.forum_topic_created is not None:
        return False  # in a forum topic every message "replies" to the topic's first message
    return original.from_user.id == bot.id


def _strip_bot_name(text: str, bot: Bot) -> str:
    name = re.escape(bot.username)
    text = re.sub(rf"^(/[A-Za-z0-9_]+)@{name}\b", r"\1", text, flags=re.IGNORECASE)
    text = re.sub(rf"(?:^|(?<=\s))@{name}\b[,:]?[ \t]*", "", text, flags=re.IGNORECASE)
    return text.strip()


def _starts_with_command(message: Message) -> bool:
    entities = message.entities if message.text is not None else message.caption_entities
    return any(entity.type == MessageEntity.BOT_COMMAND and entity.offset == 0 for entity in entities)
