"""A tool server's question in `agentd chat` (server-everything's elicitation tool, the fake model): the
question is printed while the turn runs, and `/answer` typed then is taken at once and completes the
tool call — in a real terminal (a pseudo-terminal), in-process and through a running daemon, and with
the chat's input and output pipes (a script)."""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path

from testkit.fake_llm import FakeLLM
from tests.daemon_process import DaemonProcess
from tests.test_chat_terminal import Terminal
from tests.tools.reference import everything, needs_node
from tests.tools.support import tool_results

pytestmark = needs_node
ASK = "everything__trigger-elicitation-request"
QUESTION = re.compile(r"The tool server everything asks \[([0-9a-f]{6})\]")


def on_everything(root: Path, fake: FakeLLM) -> None:
    (root / "agents").mkdir()
    (root / "agentd.yaml").write_text(
        f"providers: {{fake: {{kind: openai, base_url: '{fake.openai_base_url}', api_key: k}}}}\n"
    )
    tools = json.dumps({"mcp": {"everything": everything()}})
    (root / "agents" / "assistant.yaml").write_text(
        f"purpose: You help.\nmodel: fake/m\nmemory: {{scope: thread}}\ntools: {tools}\n"
    )
    fake.reply(tool_calls=[(ASK, {})])
    fake.reply("Thanks, noted.")


def answers_in_the_terminal(term: Terminal, fake: FakeLLM) -> None:
    term.wait_for("you> ")
    term.type("sign me up\r")
    seen = term.wait_for("expires in", timeout=30)
    match = QUESTION.search(seen)
    assert match, seen
    qid = match.group(1)
    term.type(f'/answer {qid} {{"name": "Ana Lima", "check": "yes"}}\r')
    term.wait_for(f"Sent your answer to everything [{qid}].")
    term.wait_for("Thanks, noted.")
    term.wait_for("you> ", times=2)
    term.type("exit\r")
    assert term.exit_code() == 0
    [result] = tool_results(fake.requests[1].json)
    assert "- Name: Ana Lima" in result and "Agreed to terms: true" in result


def test_the_question_is_printed_and_answered_while_the_turn_runs(tmp_path: Path) -> None:
    with FakeLLM() as fake:
        on_everything(tmp_path, fake)
        term = Terminal(tmp_path, "assistant")
        try:
            answers_in_the_terminal(term, fake)
        finally:
            term.close()


async def test_through_a_running_daemon_the_question_is_printed_and_answered(tmp_path: Path) -> None:
    with FakeLLM() as fake:
        on_everything(tmp_path, fake)
        daemon = await DaemonProcess(tmp_path).start()
        term = Terminal(tmp_path, "assistant")
        try:
            answers_in_the_terminal(term, fake)
            assert f"the daemon at {daemon.url}" in term.seen
        finally:
            term.close()
            assert daemon.stop() == 0


def test_a_script_on_pipes_reads_the_question_and_answers_it(tmp_path: Path) -> None:
    with FakeLLM() as fake:
        on_everything(tmp_path, fake)
        fake.reply("And hello to you.")
        chat = subprocess.Popen(
            [sys.executable, "-m", "agentd.cli", "chat", "assistant"],
            cwd=tmp_path,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert chat.stdin is not None and chat.stdout is not None
        try:
            # a second line sent at once waits for the first one's reply (it is no answer)
            chat.stdin.write(b"sign me up\nhello\n")
            chat.stdin.flush()
            out = ""
            deadline = time.monotonic() + 30
            while not (match := QUESTION.search(out)):
                assert time.monotonic() < deadline, out
                if select.select([chat.stdout], [], [], 0.1)[0]:
                    out += os.read(chat.stdout.fileno(), 4096).decode()
            rest, err = chat.communicate(f"/decline {match.group(1)}\n".encode(), timeout=60)
        finally:
            if chat.poll() is None:
                chat.kill()
        out += rest.decode()
        assert chat.returncode == 0, err.decode()
        declined = out.index(f"Declined [{match.group(1)}]")
        assert declined < out.index("Thanks, noted.") < out.index("And hello to you.")
        assert "decline" in tool_results(fake.requests[1].json)[0].lower()
