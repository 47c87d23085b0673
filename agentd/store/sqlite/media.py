"""The files people send (StoreMedia, MediaBlobs, PruneMedia): content-addressed by sha256 within
a conversation and sender, so erasing one person never takes bytes another person sent."""

from __future__ import annotations

import json
import sqlite3

from agentd.store.queries import MediaBlobs, MediaFile
from agentd.store.sqlite.handlers import handles
from agentd.store.writes import PruneMedia, StoreMedia


@handles(StoreMedia)
def store_media(conn: sqlite3.Connection, op: StoreMedia) -> None:
    conn.executemany(
        "INSERT INTO media (conversation_key, sender, sha256, kind, mime_type, filename, size, data,"
        " created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (conversation_key, sender, sha256)"
        " DO UPDATE SET created_at = excluded.created_at",
        [
            (
                m.conversation_key,
                m.sender,
                m.sha256,
                m.kind,
                m.mime_type,
                m.filename,
                m.size,
                m.data,
                m.created_at,
            )
            for m in op.items
        ],
    )


@handles(MediaBlobs)
def media_blobs(conn: sqlite3.Connection, q: MediaBlobs) -> dict[str, bytes]:
    rows = conn.execute(
        "SELECT sha256, data FROM media WHERE conversation_key = ? AND sha256 IN (SELECT value FROM json_each(?))",
        (q.conversation_key, json.dumps(list(q.sha256s))),
    )
    return {sha: bytes(data) for sha, data in rows}


@handles(MediaFile)
def media_file(conn: sqlite3.Connection, q: MediaFile) -> tuple[bytes, str, str | None] | None:
    row = conn.execute(
        "SELECT data, mime_type, filename FROM media WHERE sha256 = ? ORDER BY created_at DESC LIMIT 1",
        (q.sha256,),
    ).fetchone()
    return None if row is None else (bytes(row[0]), row[1], row[2])


@handles(PruneMedia)
def prune_media(conn: sqlite3.Connection, op: PruneMedia) -> int:
    return conn.execute("DELETE FROM media WHERE created_at < ?", (op.older_than,)).rowcount
