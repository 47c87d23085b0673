"""GET /agents/{agent}/media/{sha256}: a file of the agent's by its hash (the files a reply lists: those
its tools returned), with its own Content-Type, behind the same token as the other routes. Only the
agent's own store is read, so another agent's file is a 404 here, as is one erased or pruned."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Path, Response

from agentd.http.bodies import agent_param
from agentd.http.directory import AgentDirectory
from agentd.http.errors import ApiError, errors
from agentd.http.lookup import running_agent

SHA256 = r"^[0-9a-f]{64}$"
FILE = {
    "description": "the file's bytes, with its MIME type",
    "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},  # image/png, audio/wav, ...
}


def add_media_routes(app: FastAPI, directory: AgentDirectory, protected: Sequence[Any]) -> None:
    @app.get(
        "/agents/{agent}/media/{sha256}",
        tags=["agents"],
        dependencies=list(protected),
        response_class=Response,
        responses={**errors(404, 503), 200: FILE},
    )
    async def media(
        agent: str = agent_param(),
        sha256: str = Path(
            description="the file's SHA-256 (64 lowercase hex digits)", json_schema_extra={"pattern": SHA256}
        ),
    ) -> Response:
        """A file the agent keeps (a tool's image a reply listed), by its SHA-256."""
        target = running_agent(directory, agent)
        if not re.fullmatch(SHA256, sha256):
            raise ApiError(
                404, f"no file {sha256!r}: a file is named by its SHA-256, 64 lowercase hex digits"
            )
        found = await target.media_by_hash(sha256)
        if found is None:
            raise ApiError(
                404, f"agent {agent!r} keeps no file {sha256} (never sent here, erased, or pruned)"
            )
        data, mime_type, filename = found
        headers = {"Content-Disposition": f'inline; filename="{_safe(filename or sha256)}"'}
        return Response(data, media_type=mime_type, headers=headers)


def _safe(name: str) -> str:
    """A file name fit for a quoted header value."""
    return re.sub(r"[^A-Za-z0-9._ -]", "_", name)[:128]
