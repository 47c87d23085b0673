"""`agentd chat AGENT`: a conversation in this terminal (key repl:<session>).

With no daemon on the data folder, the agent runs in this process, built as
the daemon builds it. When a daemon owns the folder, the lines go to that
daemon over its HTTP API, so what this conversation remembers is at once what
the daemon sees (and two processes never write one SQLite file).

The terminal: line editing and history (readline), `exit`/`quit` or Ctrl-D to
leave, Ctrl-C leaves at once (also while waiting for the model), a spinner on
stderr while the model is thinking.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import itertools
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from agentd.cli.local import local_agent
from agentd.cli.remote import answer, running_daemon
from agentd.engine.agent import Agent
from agentd.events import CONVERSATION_ID_RE, InboundEvent

LEAVE = {"exit", "quit", ":q"}
Say = Callable[[str], str]


def cmd_chat(args: argparse.Namespace) -> int:
    if not CONVERSATION_ID_RE.match(args.session):
        print("agentd: --session must be 1-128 of [A-Za-z0-9_.:-]", file=sys.stderr)
        return 2
    with running_daemon(args) as client:
        if client is None:
            return _in_process(args)

        def say(line: str) -> str:
            sent = client.post(f"/agents/{args.agent}/repl", json={"session": args.session, "text": line})
            return str(answer(sent)["reply"])

        where = f"{args.agent} on the daemon at {client.base_url}, conversation repl:{args.session}"
        return _repl(where, say)


def _in_process(args: argparse.Namespace) -> int:
    with _loop_thread() as run:
        opened = local_agent(args)
        agent: Agent = run(opened.__aenter__())
        try:

            def say(line: str) -> str:
                event = InboundEvent(agent.name, f"repl:{args.session}", line, "repl", user_id="local")
                return run(agent.handle(event)).text

            where = f"{agent.name} ({agent.spec.model.name}), conversation repl:{args.session}"
            return _repl(where, say)
        finally:
            run(opened.__aexit__(None, None, None))


def _main_thread_only() -> None:
    """Keep SIGINT (Ctrl-C) for the main thread: delivered to another thread it would not wake the
    main one out of readline's wait, and the terminal would seem to ignore it until Enter."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


@contextlib.contextmanager
def _loop_thread() -> Iterator[Callable[[Any], Any]]:
    """An event loop on a thread of its own, so the terminal stays in the main thread (readline, Ctrl-C)
    while the agent's background work goes on between lines."""
    loop = asyncio.new_event_loop()

    def serve() -> None:
        _main_thread_only()  # and so are the threads this one starts (the store's, httpx's)
        loop.run_forever()

    thread = threading.Thread(target=serve, name="agentd-chat-loop", daemon=True)
    thread.start()

    def run(coro: Any) -> Any:
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            return future.result()
        except (KeyboardInterrupt, concurrent.futures.CancelledError):
            future.cancel()
            raise

    try:
        yield run
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)


def _repl(where: str, say: Say) -> int:
    interactive = sys.stdin.isatty()
    if interactive:
        with contextlib.suppress(ImportError):
            import readline  # noqa: F401  (input() then edits lines and keeps a history)
    print(f"agentd chat: {where}. /help for commands; exit, Ctrl-D or Ctrl-C to leave.", flush=True)
    try:
        while True:
            try:
                line = input("you> " if interactive else "")
            except EOFError:
                if interactive:
                    print()  # Ctrl-D: leave the shell's prompt on a line of its own
                return 0
            if line.strip().lower() in LEAVE:
                return 0
            if not line.strip():
                continue
            with _spinner(interactive):
                reply = say(line)
            print(reply, flush=True)
    except KeyboardInterrupt:
        print()
        return 130


@contextlib.contextmanager
def _spinner(show: bool) -> Iterator[None]:
    """A spinner on stderr until the reply is there (only on a terminal)."""
    if not show:
        yield
        return
    done = threading.Event()

    def spin() -> None:
        _main_thread_only()
        for frame in itertools.cycle("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"):
            if done.wait(0.1):
                break
            sys.stderr.write(f"\r{frame} thinking…")
            sys.stderr.flush()
        sys.stderr.write("\r\033[K")
        sys.stderr.flush()

    spinner = threading.Thread(target=spin, daemon=True)
    spinner.start()
    try:
        yield
    finally:
        done.set()
        spinner.join()
