"""The `agentd` command starts fast and ends quietly (issue 17, item 21).

Every command used to import the daemon, the engine, the MCP SDK and numpy before parsing its
arguments (1.2-1.4 s, `--version` included); and output piped into a reader that leaves (`| head`)
ended in BrokenPipeError tracebacks.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentd.cli.store import STORE_URL_ENV
from agentd.daemon.resources import STORE_URL_ENV as DAEMON_STORE_URL_ENV

HEAVY = ("agentd.daemon", "agentd.engine", "agentd.http", "agentd.store", "mcp", "numpy", "httpx", "fastapi")


def test_building_the_parser_imports_none_of_the_daemon() -> None:
    code = (
        "import sys; from agentd.cli.main import build_parser; build_parser(); "
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r} or m.startswith({HEAVY!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_store_copy_help_names_the_daemons_variable() -> None:
    assert STORE_URL_ENV == DAEMON_STORE_URL_ENV


def _into_a_closed_pipe(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `agentd ARGS` with stdout a pipe whose reader has already gone, as `| head` leaves it."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [sys.executable, "-m", "agentd.cli", *args],
            cwd=cwd,
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write)


@pytest.mark.parametrize("args", [("schema",), ("--help",), ("audit", "export"), ("check",)])
def test_output_into_a_closed_pipe_ends_quietly(tmp_path: Path, args: tuple[str, ...]) -> None:
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "assistant.yaml").write_text("purpose: You help.\n")
    done = _into_a_closed_pipe(tmp_path, *args)
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
    assert "Exception ignored" not in done.stderr, done.stderr
    assert done.returncode in (0, 141), done.stderr


def test_a_pipe_that_reads_everything_still_gets_everything(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agentd.cli", "schema"], capture_output=True, text=True, check=True
    )
    assert done.stdout.rstrip().endswith("}")


def test_audit_export_of_a_real_trail_into_head_ends_quietly(tmp_path: Path) -> None:
    """The issue's own case: `agentd audit export | head -1` on a folder with a trail."""
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "assistant.yaml").write_text(
        "purpose: x\nmemory: {scope: thread, persistent: true}\n"
    )
    lines = "".join(f"remember k{i}: v\n" for i in range(300))  # an export well over a pipe buffer (64 KiB)
    subprocess.run(
        [sys.executable, "-m", "agentd.cli", "chat", "assistant"],
        cwd=tmp_path,
        input=lines,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    done = subprocess.run(
        f"{sys.executable} -m agentd.cli audit export | head -1",
        shell=True,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.startswith('{"chain": "assistant"') or done.stdout.startswith("{"), done.stderr
    assert done.stdout.count("\n") == 1
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr


def test_a_broken_pipe_that_is_not_stdout_is_still_an_error() -> None:
    """Only stdout's reader leaving is quiet: a command's own broken connection still shows."""
    code = (
        "import sys\n"
        "from agentd.cli.pipes import quiet_on_closed_pipe\n"
        "try:\n"
        "    with quiet_on_closed_pipe():\n"
        "        raise BrokenPipeError(32, 'a socket of the command')\n"
        "except BrokenPipeError:\n"
        "    print('raised')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout == "raised\n", done.stderr
