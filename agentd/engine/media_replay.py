"""Which images a request shows the model: those of the last `media.images_in_context` turns of the
person (older ones are read by their stand-in: a description, a file name), each once. The bytes of
this turn's files come with the intake; older ones are read from the store, only those shown."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agentd.engine.conversation import Conversation
from agentd.messages import Message
from agentd.store.queries import MediaBlobs


def shown_images(messages: Sequence[Message], turns: int) -> list[str]:
    """The sha256 of every image in the last `turns` messages of a person, newest first, once each."""
    found: list[str] = []
    seen_turns = 0
    for i in range(len(messages) - 1, -1, -1):
        if seen_turns >= turns:
            break
        message = messages[i]
        if message.role != "user":
            continue
        seen_turns += 1
        found.extend(
            p.sha256 for p in message.media if p.media == "image" and p.sha256 and p.sha256 not in found
        )
    return found


async def images_for(
    conv: Conversation, messages: Sequence[Message], fresh: Mapping[str, bytes]
) -> dict[str, bytes]:
    """The bytes of the images the request shows (none for a model that does not see images)."""
    if not conv.spec.model.takes("image"):
        return {}
    wanted = shown_images(messages, conv.spec.media.images_in_context)
    if not wanted:
        return {}
    blobs = {sha: fresh[sha] for sha in wanted if sha in fresh}
    missing = [sha for sha in wanted if sha not in blobs]
    if missing:
        stored: dict[str, bytes] = await conv.agent.store.read(MediaBlobs(conv.key, missing))
        blobs.update(stored)
    return blobs
