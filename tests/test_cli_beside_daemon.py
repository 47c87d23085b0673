"""The CLI beside a running daemon, as a new user meets it (issue 17, items 15 and 16): an agent the
daemon does not serve is refused before anything else, and a daemon serving another agents folder than
`--agents` names is named with that folder instead of answering 404."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.daemon_process import DaemonProcess
from tests.support import agentd_cli as agentd


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[DaemonProcess]:
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "assistant.yaml").write_text("purpose: You help.\nchannels: {webhook: {}}\n")
    other = tmp_path / "examples" / "agents"
    other.mkdir(parents=True)
    (other / "notes.yaml").write_text("purpose: You keep notes.\n")
    running = await DaemonProcess(tmp_path).start()
    yield running
    running.stop()


def test_chat_with_an_agent_the_daemon_does_not_serve_fails_before_the_greeting(
    daemon: DaemonProcess,
) -> None:
    done = agentd(daemon.root, "chat", "nosuch", stdin="hello\n")
    assert done.returncode == 1
    assert "agentd chat:" not in done.stdout  # no greeting, no line asked for
    assert done.stderr.strip() == (
        f"agentd: the daemon at {daemon.url} answered 404: no agent named 'nosuch'"
    )


def test_chat_through_the_daemon_greets_with_its_port(daemon: DaemonProcess) -> None:
    done = agentd(daemon.root, "chat", "assistant", stdin="hello\n")
    assert done.returncode == 0, done.stderr
    assert f"the daemon at {daemon.url}, conversation repl:local" in done.stdout
    assert "You said: hello" in done.stdout


def test_a_daemon_serving_another_agents_folder_is_named_not_asked(daemon: DaemonProcess) -> None:
    served = (daemon.root / "agents").resolve()
    done = agentd(daemon.root, "tools", "notes", "--agents", "examples/agents")
    assert done.returncode == 1
    assert "404" not in done.stderr
    assert f"serves the agents folder {served}, not {(daemon.root / 'examples' / 'agents').resolve()}" in (
        done.stderr
    )
    assert f"(pid {daemon.proc.pid}, {daemon.url})" in done.stderr  # type: ignore[union-attr]
    chat = agentd(daemon.root, "chat", "notes", "--agents", "examples/agents", stdin="hi\n")
    assert chat.returncode == 1 and f"serves the agents folder {served}" in chat.stderr


def test_a_second_daemon_on_the_folder_is_told_which_agents_folder_the_first_serves(
    daemon: DaemonProcess,
) -> None:
    done = agentd(daemon.root, "run", "--agents", "examples/agents", "--port", "0")
    assert done.returncode == 1
    served = (daemon.root / "agents").resolve()
    assert f"serving {daemon.url} for the agents folder {served}" in done.stderr


def test_the_readme_starts_the_example_daemon_on_a_folder_of_its_own() -> None:
    """Following the Tools section beside the "Run it" daemon (which holds data/): its daemon and its
    `agentd tools` name another data folder, and the daemon comes first."""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    section = readme.split("## Tools (MCP)", 1)[1].split("**The agent file**", 1)[0]
    run = section.index("agentd run --agents examples/agents --data data/examples --port 8766")
    tools = section.index("agentd tools notes --agents examples/agents --data data/examples")
    assert run < tools
