"""`agentd chat AGENT`: a conversation in this terminal (key repl:<session>).

With no daemon on the data folder, the agent runs in this process, built as
the daemon builds it. When a daemon owns the folder, the lines go to that
daemon over its HTTP API, so what this conversation remembers is at once what
the daemon sees (and two processes never write one SQLite file).

The terminal: line editing and history (readline), `exit`/`quit` or Ctrl-D to
leave, Ctrl-C at the prompt leaves at once; Ctrl-C while the agent answers stops
that run as /stop does (what was shown stays, marked stopped) and the chat goes
on (through a daemon, by its stop route). A spinner on
stderr while the model is thinking, and the reply printed as it is written
(terminal.py; through the daemon, its streaming REPL route). Printed to a pipe
instead, each reply comes whole.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from agentd.cli.attach import as_json, attachment_from, is_attach, said
from agentd.cli.local import local_agent
from agentd.cli.remote import address, answer, reaching, running_daemon, streamed_answer
from agentd.cli.terminal import Spinner, TerminalReply, main_thread_only
from agentd.engine.agent import Agent
from agentd.engine.stop_request import STOP_WAIT_S
from agentd.errors import AgentdError
from agentd.events import CONVERSATION_ID_RE, Attachment, InboundEvent, Reply, ReplySink

LEAVE = {"exit", "quit", ":q"}
STOPPED = "(Stopped.)"
# a line, the files attached to it (/attach), and who hears the reply as it is written
Say = Callable[[str, tuple[Attachment, ...], ReplySink | None], str]


def cmd_chat(args: argparse.Namespace) -> int:
    if not CONVERSATION_ID_RE.match(args.session):
        print("agentd: --session must be 1-128 of [A-Za-z0-9_.:-]", file=sys.stderr)
        return 2
    with running_daemon(args) as client:
        if client is None:
            return _in_process(args)

        key = f"repl:{args.session}"
        with reaching(client):  # an agent the daemon does not serve fails here, before a greeting
            answer(client.get(f"/agents/{args.agent}/status", params={"conversation_key": key}))

        def say(line: str, files: tuple[Attachment, ...], sink: ReplySink | None) -> str:
            path = f"/agents/{args.agent}/repl"
            body = {
                "session": args.session,
                "text": line,
                **({"attachments": as_json(files)} if files else {}),
            }
            try:
                with reaching(client, "your message"):
                    if sink is not None:
                        return str(streamed_answer(client, path, body, sink)["reply"])
                    return str(answer(client.post(path, json=body))["reply"])
            except KeyboardInterrupt:
                # Ctrl-C while the daemon answers: the request is given up and the run stopped there
                # (stored as stopped); the chat goes on
                with reaching(client, "the stop"):
                    answer(client.post(f"/agents/{args.agent}/conversations/{key}/stop"))
                shown = sink.shown if isinstance(sink, TerminalReply) else ""
                return f"{shown}\n\n{STOPPED}" if shown else STOPPED

        where = f"{args.agent} on the daemon at {address(client.base_url)}, conversation {key}"
        return _repl(where, say)


def _in_process(args: argparse.Namespace) -> int:
    with _loop_thread() as run:
        opened = local_agent(args)
        agent: Agent = run(opened.__aenter__())
        try:

            def say(line: str, files: tuple[Attachment, ...], sink: ReplySink | None) -> str:
                event = InboundEvent(agent.name, key, line, "repl", user_id="local", attachments=files)
                reply: Reply = run(
                    agent.handle(event, sink=sink), stop=lambda: agent.stop_run(key, "repl:local")
                )
                return reply.text

            key = f"repl:{args.session}"

            where = f"{agent.name} ({agent.spec.model.name}), conversation repl:{args.session}"
            return _repl(where, say)
        finally:
            run(opened.__aexit__(None, None, None))


@contextlib.contextmanager
def _loop_thread() -> Iterator[Callable[..., Any]]:
    """An event loop on a thread of its own, so the terminal stays in the main thread (readline, Ctrl-C)
    while the agent's background work goes on between lines."""
    loop = asyncio.new_event_loop()

    def serve() -> None:
        main_thread_only()  # and so are the threads this one starts (the store's, httpx's)
        loop.run_forever()

    thread = threading.Thread(target=serve, name="agentd-chat-loop", daemon=True)
    thread.start()

    def run(coro: Any, stop: Callable[[], Any] | None = None) -> Any:
        """`coro`'s result; on Ctrl-C, `stop()` (a coroutine) is run and `coro` then answers (a stopped
        run's reply), or without `stop` it is cancelled and the Ctrl-C goes on."""
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            return future.result()
        except KeyboardInterrupt:
            if stop is None:
                future.cancel()
                raise
        except concurrent.futures.CancelledError:
            future.cancel()
            raise
        try:
            asyncio.run_coroutine_threadsafe(stop(), loop).result(STOP_WAIT_S)  # a second Ctrl-C leaves
            return future.result(STOP_WAIT_S)
        except concurrent.futures.TimeoutError:
            # nothing stoppable answered in time (a command such as /compact runs): leave, as Ctrl-C does
            future.cancel()
            raise KeyboardInterrupt from None

    try:
        yield run
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)


def _repl(where: str, say: Say) -> int:
    interactive = sys.stdin.isatty()
    streaming = sys.stdout.isatty()  # a pipe gets each reply whole
    if interactive:
        with contextlib.suppress(ImportError):
            import readline  # noqa: F401  (input() then edits lines and keeps a history)
    print(
        f"agentd chat: {where}. /help for commands, /attach PATH to send a file; exit, Ctrl-D or Ctrl-C to"
        " leave.",
        flush=True,
    )
    attached: list[Attachment] = []
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
            if is_attach(line):
                try:
                    attached.append(attachment_from(line))
                    print(said(attached[-1]), flush=True)
                except (OSError, ValueError) as e:
                    print(f"agentd: cannot attach: {e}", file=sys.stderr, flush=True)
                continue
            files, attached = tuple(attached), []
            spinner = Spinner(interactive)
            shown: TerminalReply | None = None
            try:
                if streaming:
                    shown = TerminalReply(spinner)
                    shown.finish(say(line, files, shown))
                else:
                    reply = say(line, files, None)
                    spinner.stop()
                    print(reply, flush=True)
            except AgentdError as e:
                # the daemon went away, or refused this line: a person at the terminal keeps the session
                # and the line (readline's history: Up and Enter send it again); a script stops here
                spinner.stop()
                if shown is not None:
                    shown.abandon()
                if not interactive:
                    raise
                print(f"agentd: {e}. Up and Enter send the line again.", file=sys.stderr, flush=True)
            finally:
                spinner.stop()
    except KeyboardInterrupt:
        print()
        return 130
