"""`agentd chat` in a real terminal (a pseudo-terminal): editing, history, leaving, Ctrl-C, the spinner."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.fake_llm import FakeLLM
from testkit.waiting import wait_until
from tests.daemon_process import DaemonProcess
from tests.support import agentd_cli

SLOW = "purpose: You help.\nmemory: {scope: thread}\nmodel: slow/m\n"


def _own_terminal() -> None:
    """In the child: a session of its own whose controlling terminal is the pty, as a shell gives it,
    so Ctrl-C typed there is a SIGINT to it (and to nothing else)."""
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """`agentd chat` with a pseudo-terminal for stdin, stdout and stderr, as a person would run it."""

    def __init__(self, root: Path, *args: str):
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agentd.cli", "chat", *args],
            cwd=root,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env={**os.environ, "TERM": "xterm", "PYTHONUNBUFFERED": "1"},
            preexec_fn=_own_terminal,
        )
        os.close(slave)
        self.seen = ""

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def waiting_for_a_key(self) -> bool:
        """Whether the chat's main thread sleeps in readline's select(), as when a person sits at the
        prompt. (A Ctrl-C landing in the microseconds between printing the prompt and that select()
        is only seen by CPython's readline at the next key: no person types that fast.)"""
        try:
            wchan = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/wchan").read_text()
        except OSError:
            return False
        return "select" in wchan or "poll_schedule" in wchan

    def wait_for(self, text: str, timeout: float = 20.0, times: int = 1) -> str:
        deadline = time.monotonic() + timeout
        while self.seen.count(text) < times:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"never saw {text!r}; the terminal shows:\n{self.seen}")
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    self.seen += os.read(self.master, 4096).decode(errors="replace")
                except OSError:  # the child closed the terminal
                    break
        assert self.seen.count(text) >= times, f"never saw {text!r}; the terminal shows:\n{self.seen}"
        return self.seen

    def exit_code(self, timeout: float = 30.0) -> int:
        code = self.proc.wait(timeout=timeout)
        with_rest = self._drain()
        self.seen += with_rest
        return code

    def _drain(self) -> str:
        out = ""
        while select.select([self.master], [], [], 0.05)[0]:
            try:
                chunk = os.read(self.master, 4096)
            except OSError:
                break
            if not chunk:
                break
            out += chunk.decode(errors="replace")
        return out

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "assistant.yaml").write_text("purpose: You help.\nmemory: {scope: thread}\n")
    return tmp_path


@pytest.fixture
def terminal(root: Path) -> Iterator[Terminal]:
    term = Terminal(root, "assistant")
    yield term
    term.close()


def test_up_recalls_the_last_line_and_exit_leaves_without_asking_the_model(terminal: Terminal) -> None:
    terminal.wait_for("you> ")
    terminal.type("first line\r")
    terminal.wait_for("You said: first line\r\nyou> ")  # the next prompt: readline reads keys again
    terminal.type("\x1b[A\r")  # Up, Enter: the line again, from readline's history
    terminal.wait_for("I see 2 earlier messages")
    terminal.wait_for("You said: first line", times=2)  # streamed: the whole reply, the second time
    assert "^[[A" not in terminal.seen
    terminal.type("exit\r")
    assert terminal.exit_code() == 0
    assert "You said: exit" not in terminal.seen


def test_ctrl_d_leaves_on_a_new_line(terminal: Terminal) -> None:
    terminal.wait_for("you> ")
    terminal.type("\x04")
    assert terminal.exit_code() == 0
    assert terminal.seen.rstrip(" ").endswith("you> \r\n")


async def test_ctrl_c_at_the_prompt_leaves_at_once(terminal: Terminal) -> None:
    terminal.wait_for("you> ")
    await wait_until(terminal.waiting_for_a_key, "the chat to wait for a key")
    terminal.type("\x03")  # no Enter needed
    assert terminal.exit_code(timeout=30) == 130


def stops_the_run_and_goes_on(term: Terminal, fake: FakeLLM) -> None:
    """Ctrl-C while the model is slow: that run is stopped, the chat goes on and the next line is answered."""
    fake.hang(30)
    term.wait_for("you> ")
    term.type("hello\r")
    term.wait_for("thinking…")
    deadline = time.monotonic() + 20  # the spinner shows before the model is asked: Ctrl-C the hang itself
    while not fake.requests and time.monotonic() < deadline:
        time.sleep(0.01)
    term.type("\x03")
    term.wait_for("(Stopped.)")
    term.wait_for("you> ", times=2)  # the chat goes on
    fake.reply("Back again.")
    term.type("still there?\r")
    term.wait_for("Back again.")
    term.type("exit\r")
    assert term.exit_code() == 0


def stored_runs(root: Path) -> list[tuple[str, str]]:
    out = agentd_cli(root, "runs", "assistant", "--json")
    assert out.returncode == 0, out.stderr
    return [(r["trigger"], r["status"]) for r in json.loads(out.stdout)]


def test_a_slow_model_shows_a_spinner_and_ctrl_c_stops_that_run_not_the_chat(root: Path) -> None:
    with FakeLLM() as fake:
        (root / "agentd.yaml").write_text(
            f"providers: {{slow: {{kind: openai, base_url: '{fake.openai_base_url}', api_key: k}}}}\n"
        )
        (root / "agents" / "assistant.yaml").write_text(SLOW)
        term = Terminal(root, "assistant")
        try:
            stops_the_run_and_goes_on(term, fake)
        finally:
            term.close()
        assert sorted(stored_runs(root)) == [("message", "ok"), ("message", "stopped")]


async def test_through_a_running_daemon_ctrl_c_stops_the_run_there(root: Path) -> None:
    with FakeLLM() as fake:
        (root / "agentd.yaml").write_text(
            f"providers: {{slow: {{kind: openai, base_url: '{fake.openai_base_url}', api_key: k}}}}\n"
        )
        (root / "agents" / "assistant.yaml").write_text(SLOW)
        daemon = await DaemonProcess(root).start()
        term = Terminal(root, "assistant")
        try:
            stops_the_run_and_goes_on(term, fake)
            assert f"the daemon at {daemon.url}" in term.seen
        finally:
            term.close()
            assert daemon.stop() == 0
        assert sorted(stored_runs(root)) == [("message", "ok"), ("message", "stopped")]


# -- the reply as it is written --------------------------------------------------------------------

STREAMED = "purpose: You help.\nmemory: {scope: thread, persistent: true}\nmodel: fake/m\n"


def on_fake_model(root: Path, fake: FakeLLM) -> None:
    (root / "agentd.yaml").write_text(
        f"providers: {{fake: {{kind: openai, base_url: '{fake.openai_base_url}', api_key: k}}}}\n"
    )
    (root / "agents" / "assistant.yaml").write_text(STREAMED)


def shows_words_as_they_come(term: Terminal, fake: FakeLLM) -> None:
    fake.reply("alpha beta omega", pieces=["alpha ", "beta ", "omega"], delay=0.6)
    term.wait_for("you> ")
    term.type("hello\r")
    seen = term.wait_for("alpha")
    assert "omega" not in seen, "the first word shows before the last is written"
    assert seen.index("thinking…") < seen.index("alpha"), "the spinner turns until the first text"
    seen = term.wait_for("omega")
    assert "alpha beta omega" in seen
    term.type("exit\r")
    assert term.exit_code() == 0


def test_the_reply_is_printed_as_it_is_written(root: Path) -> None:
    with FakeLLM() as fake:
        on_fake_model(root, fake)
        term = Terminal(root, "assistant")
        try:
            shows_words_as_they_come(term, fake)
        finally:
            term.close()


async def test_through_a_running_daemon_the_reply_is_printed_as_it_is_written(root: Path) -> None:
    with FakeLLM() as fake:
        on_fake_model(root, fake)
        daemon = await DaemonProcess(root).start()
        term = Terminal(root, "assistant")
        try:
            shows_words_as_they_come(term, fake)
            assert f"the daemon at {daemon.url}" in term.seen
        finally:
            term.close()
            assert daemon.stop() == 0


def test_text_written_before_a_tool_call_is_taken_back(root: Path) -> None:
    with FakeLLM() as fake:
        on_fake_model(root, fake)
        fake.reply(
            "Let me note that. ", tool_calls=[("remember", {"key": "tea", "value": "green"})], delay=0.2
        )
        fake.reply("Noted: tea.", delay=0.2)
        term = Terminal(root, "assistant")
        try:
            term.wait_for("you> ")
            term.type("I drink green tea\r")
            seen = term.wait_for("Noted: tea.")
            preamble = seen.index("Let me note that.")
            erased = seen.index("\x1b[J", preamble)  # cleared from the reply's first row down
            assert preamble < erased < seen.rindex("Noted: tea.")
            term.type("exit\r")
            assert term.exit_code() == 0
        finally:
            term.close()


# -- beside a daemon that stops (issue 17, item 15) --------------------------------------------------


async def test_a_daemon_that_stops_is_named_with_its_port_and_the_line_can_be_sent_again(root: Path) -> None:
    daemon = await DaemonProcess(root).start()
    term = Terminal(root, "assistant")
    try:
        term.wait_for("you> ")
        term.type("first\r")
        term.wait_for("You said: first")
        assert daemon.stop() == 0
        term.type("second\r")
        seen = term.wait_for("Up and Enter send the line again.")
        assert f"the daemon at {daemon.url} cannot be reached" in seen
        assert "your message was not sent" in seen
        assert "Traceback" not in seen and "ConnectError" not in seen
        term.wait_for("you> ", times=3)  # the session goes on
        await daemon.start()  # back on the same port
        term.type("\x1b[A\r")  # Up, Enter: the line that was not sent, from readline's history
        term.wait_for("You said: second")
        term.type("exit\r")
        assert term.exit_code() == 0
    finally:
        term.close()
        daemon.stop()
