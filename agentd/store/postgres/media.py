"""The files people send (StoreMedia, MediaBlobs, PruneMedia), as agentd/store/sqlite/media.py keeps
them, per agent."""

from __future__ import annotations

from agentd.store.postgres.handlers import Cx, Later, handles, rowcount
from agentd.store.queries import MediaBlobs, MediaFile
from agentd.store.writes import PruneMedia, StoreMedia


@handles(StoreMedia, statements=2)  # one INSERT per file
def store_media(cx: Cx, op: StoreMedia) -> None:
    for m in op.items:
        cx.run(
            "INSERT INTO media (agent_id, conversation_key, sender, sha256, kind, mime_type, filename, size,"
            " data, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (agent_id, conversation_key, sender, sha256)"
            " DO UPDATE SET created_at = excluded.created_at",
            (
                cx.agent_id,
                m.conversation_key,
                m.sender,
                m.sha256,
                m.kind,
                m.mime_type,
                m.filename,
                m.size,
                m.data,
                m.created_at,
            ),
        )


@handles(MediaBlobs)
def media_blobs(cx: Cx, q: MediaBlobs) -> Later[dict[str, bytes]]:
    cur = cx.run(
        "SELECT sha256, data FROM media WHERE agent_id = %s AND conversation_key = %s AND sha256 = ANY(%s)",
        (cx.agent_id, q.conversation_key, list(q.sha256s)),
    )
    return Later(lambda: {sha: bytes(data) for sha, data in cur.fetchall()})


@handles(MediaFile)
def media_file(cx: Cx, q: MediaFile) -> Later[tuple[bytes, str, str | None] | None]:
    cur = cx.run(
        "SELECT data, mime_type, filename FROM media WHERE agent_id = %s AND sha256 = %s"
        " ORDER BY created_at DESC LIMIT 1",
        (cx.agent_id, q.sha256),
    )

    def row() -> tuple[bytes, str, str | None] | None:
        found = cur.fetchone()
        return None if found is None else (bytes(found[0]), found[1], found[2])

    return Later(row)


@handles(PruneMedia)
def prune_media(cx: Cx, op: PruneMedia) -> Later[int]:
    return rowcount(
        cx.run("DELETE FROM media WHERE agent_id = %s AND created_at < %s", (cx.agent_id, op.older_than))
    )
