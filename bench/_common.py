"""What the benchmark scripts share. Importing it puts the repository root on the path, so the scripts
find testkit/ (the development kit, which is not packaged) however they are started; and it holds the
helpers every script would otherwise copy: percentiles, a free port, waiting for a server, the machine
and versions a run was made on, and the results file.

Each script is standalone (`python bench/<name>.py [--quick]`); .ci/bench-smoke runs every one with
--quick, so a rename in agentd breaks CI rather than the next benchmark run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import socket
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
RESULTS = REPO / "bench" / "results"
# the packages whose versions a result records (whichever are installed)
PACKAGES = (
    "agentd",
    "aiosqlite",
    "pydantic",
    "fastapi",
    "uvicorn",
    "httptools",
    "uvloop",
    "httpx",
    "psycopg",
)


def pct(xs: list[float], p: float) -> float:
    """The p-th percentile (0-100) of `xs`, interpolated between the two nearest ranks; nan when empty."""
    s = sorted(xs)
    if not s:
        return float("nan")
    k = (len(s) - 1) * p / 100.0
    f = int(k)
    c = min(f + 1, len(s) - 1)
    return s[f] + (s[c] - s[f]) * (k - f)


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def log(*parts: Any) -> None:
    """Progress, on stderr (stdout is the report)."""
    print(*parts, file=sys.stderr, flush=True)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def wait_until(ready: Callable[[], bool], timeout: float = 30.0, what: str = "server") -> None:
    """Poll `ready` every 10 ms; TimeoutError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not start")
        await asyncio.sleep(0.01)


def versions() -> dict[str, Any]:
    """The machine and the versions a run was made on (recorded in every results file)."""
    import importlib.metadata as md

    v: dict[str, Any] = {
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "load": os.getloadavg(),
    }
    for p in PACKAGES:
        with contextlib.suppress(md.PackageNotFoundError):
            v[p] = md.version(p)
    return v


def write_results(name: str, data: dict[str, Any], indent: int = 1) -> Path:
    """bench/results/<name>-<timestamp>.json; `data` gets the versions the run was made on (`versions`,
    unless it has them already), for the report printed after it too."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    data.setdefault("versions", versions())
    path.write_text(json.dumps(data, indent=indent))
    return path
