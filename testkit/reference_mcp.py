"""The MCP reference servers, installed once into a cache folder beside the project, not into it.

    everything_command()       # @modelcontextprotocol/server-everything over stdio (npm)
    filesystem_command(*dirs)  # @modelcontextprotocol/server-filesystem (npm)
    time_command()             # mcp-server-time (PyPI)
    git_command(repo)          # mcp-server-git (PyPI)

The npm servers need node; the PyPI ones are Python packages built on the 1.x
MCP SDK, which cannot share agentd's environment (agentd is on 2.x), so they
get a virtualenv of their own. Both live under `AGENTD_MCP_SERVERS` (default
~/.cache/agentd/mcp-servers); `.ci/run` installs them there ahead of the tests,
and a missing one is installed here on first use (under a lock: tests run in
parallel). Without node the npm servers' tests are skipped, saying so.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

NPM_PACKAGES = ("@modelcontextprotocol/server-everything", "@modelcontextprotocol/server-filesystem")
PYPI_PACKAGES = ("mcp-server-time", "mcp-server-git")
INSTALL_TIMEOUT_S = 600


def cache_dir() -> Path:
    default = Path.home() / ".cache" / "agentd" / "mcp-servers"
    return Path(os.environ.get("AGENTD_MCP_SERVERS", default))


def node_missing() -> str | None:
    """Why the npm servers cannot run here, or None when they can."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        return "node and npm are not installed: the npm MCP reference servers cannot run"
    return None


@contextlib.contextmanager
def _locked() -> Iterator[Path]:
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield folder


def install() -> Path:
    """Every reference server, installed if missing; the cache folder."""
    with _locked() as folder:
        bin_dir = folder / "node_modules" / ".bin"
        if node_missing() is None and not (bin_dir / "mcp-server-everything").exists():
            subprocess.run(
                ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(folder), *NPM_PACKAGES],
                check=True,
                timeout=INSTALL_TIMEOUT_S,
                stdout=subprocess.DEVNULL,
            )
        venv = folder / "py"
        if not (venv / "bin" / "mcp-server-git").exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=INSTALL_TIMEOUT_S)
            subprocess.run(
                [str(venv / "bin" / "pip"), "install", "-q", *PYPI_PACKAGES],
                check=True,
                timeout=INSTALL_TIMEOUT_S,
            )
    return folder


def everything_command() -> list[str]:
    return [str(install() / "node_modules" / ".bin" / "mcp-server-everything"), "stdio"]


def filesystem_command(*folders: str) -> list[str]:
    return [str(install() / "node_modules" / ".bin" / "mcp-server-filesystem"), *folders]


def time_command() -> list[str]:
    return [str(install() / "py" / "bin" / "mcp-server-time"), "--local-timezone", "UTC"]


def git_command(repo: str) -> list[str]:
    return [str(install() / "py" / "bin" / "mcp-server-git"), "--repository", repo]


if __name__ == "__main__":
    print(install())  # .ci/run: `python -m testkit.reference_mcp`
