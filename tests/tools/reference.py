"""The MCP reference servers in `tools.mcp` entries (testkit/reference_mcp.py installs them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testkit import reference_mcp

needs_node = pytest.mark.skipif(
    reference_mcp.node_missing() is not None, reason=reference_mcp.node_missing() or ""
)


def filesystem(*folders: Path, **options: Any) -> dict[str, Any]:
    """server-filesystem, allowed `folders` on its command line (none: it asks for MCP roots)."""
    return {"command": reference_mcp.filesystem_command(*map(str, folders)), "timeout_s": 20, **options}


def everything(**options: Any) -> dict[str, Any]:
    return {"command": reference_mcp.everything_command(), "timeout_s": 20, **options}


def time_server(**options: Any) -> dict[str, Any]:
    return {"command": reference_mcp.time_command(), "timeout_s": 20, **options}


def git_server(repo: Path, **options: Any) -> dict[str, Any]:
    return {"command": reference_mcp.git_command(str(repo)), "timeout_s": 20, **options}
