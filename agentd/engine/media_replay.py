"""Which images a request shows the model: those of the last `media.images_in_context` turns (a turn is
a person's message and what followed it: the images they sent and those their tools returned); older
ones are read by their stand-in (a description, a file name), and each is shown once. A model that
takes audio (`model.input`) is sent the audio tools returned in those turns too. The bytes of this
turn's files (the person's, the tools') are at hand; older ones are read from the store, only those
shown, and kept for the turn's next requests."""

from __future__ import annotations

from collections.abc import MutableMapping, Sequence

from agentd.config.media import InputKind
from agentd.engine.conversation import Conversation
from agentd.messages import Message
from agentd.store.queries import MediaBlobs

SENT: tuple[InputKind, ...] = ("image", "audio")  # the kinds of file a model may be sent as they are


def shown_images(messages: Sequence[Message], turns: int, kinds: Sequence[str] = ("image",)) -> list[str]:
    """The sha256 of every file of `kinds` in the last `turns` turns, newest first, once each: a
    person's images (their audio is transcribed, never sent), and what tools returned."""
    found: list[str] = []
    seen_turns = 0
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if message.role == "user":
            seen_turns += 1  # the person's message starts the turn what came after it belongs to
            if seen_turns > turns:
                break
            shas = [p.sha256 for p in message.media if p.media == "image" and p.media in kinds]
        elif message.role == "tool":
            if seen_turns >= turns:
                break
            shas = [m.sha256 for r in message.tool_results for m in r.media if m.media in kinds]
        else:
            continue
        found.extend(sha for sha in shas if sha and sha not in found)
    return found


async def images_for(
    conv: Conversation, messages: Sequence[Message], fresh: MutableMapping[str, bytes]
) -> dict[str, bytes]:
    """The bytes of the images (and audio) the request shows (none for a model that takes neither)."""
    kinds = [k for k in SENT if conv.spec.model.takes(k)]
    if not kinds:
        return {}
    wanted = shown_images(messages, conv.spec.media.images_in_context, kinds)
    if not wanted:
        return {}
    if missing := [sha for sha in wanted if sha not in fresh]:
        stored: dict[str, bytes] = await conv.agent.store.read(MediaBlobs(conv.key, missing))
        fresh.update(stored)  # the turn's next requests show them again without a read
    return {sha: fresh[sha] for sha in wanted if sha in fresh}
