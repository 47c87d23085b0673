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
instead, each reply comes whole. A tool server's question is printed while the
turn waits on it, and `/answer`, `/decline` and `/stop` typed while the agent
answers are taken at once (asides.py); other lines wait for the reply.
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

from agentd.cli.asides import PrintedProgress, Typeahead, in_thread, said_aside
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
Say = Callable[[str, tuple[Attachment, ...], ReplySink], str]


def cmd_chat(args: argparse.Namespace) -> int:
    if not CONVERSATION_ID_RE.match(args.session):
        print("agentd: --session must be 1-128 of [A-Za-z0-9_.:-]", file=sys.stderr)
        return 2
    typed = Typeahead()  # what is typed while the agent answers (asides.py)
    with running_daemon(args) as client:
        if client is None:
            return _in_process(args, typed)

        key = f"repl:{args.session}"
        with reaching(client):  # an agent the daemon does not serve fails here, before a greeting
            answer(client.get(f"/agents/{args.agent}/status", params={"conversation_key": key}))

        path = f"/agents/{args.agent}/repl"

        def aside(line: str) -> None:
            """/answer, /decline, /stop typed while the daemon answers: sent at once, beside the turn."""
            try:
                with reaching(client, "your line"):
                    said_aside(
                        answer(client.post(path, json={"session": args.session, "text": line}))["reply"]
                    )
            except AgentdError as e:
                print(f"agentd: {e}", file=sys.stderr, flush=True)

        def say(line: str, files: tuple[Attachment, ...], sink: ReplySink) -> str:
            body = {
                "session": args.session,
                "text": line,
                **({"attachments": as_json(files)} if files else {}),
            }
            streamed = in_thread(lambda: streamed_answer(client, path, body, sink))
            try:
                with reaching(client, "your message"):
                    return str(typed.wait(streamed, aside)["reply"])
            except KeyboardInterrupt:
                # Ctrl-C while the daemon answers: the run is stopped there (stored as stopped), its
                # stream ends with the stopped reply; the chat goes on
                with reaching(client, "the stop"):
                    answer(client.post(f"/agents/{args.agent}/conversations/{key}/stop"))
                with contextlib.suppress(Exception):
                    return str(streamed.result(STOP_WAIT_S)["reply"])
                shown = sink.shown if isinstance(sink, TerminalReply) else ""
                return f"{shown}\n\n{STOPPED}" if shown else STOPPED

        where = f"{args.agent} on the daemon at {address(client.base_url)}, conversation {key}"
        return _repl(where, say, typed)


def _in_process(args: argparse.Namespace, typed: Typeahead) -> int:
    with _loop_thread() as run:
        opened = local_agent(args)
        agent: Agent = run(opened.__aenter__())
        try:
            key = f"repl:{args.session}"

            def aside(line: str) -> None:
                """/answer, /decline, /stop typed while the agent answers: taken at once, beside the turn."""
                said_aside(
                    run(agent.handle(InboundEvent(agent.name, key, line, "repl", user_id="local"))).text
                )

            def say(line: str, files: tuple[Attachment, ...], sink: ReplySink) -> str:
                event = InboundEvent(agent.name, key, line, "repl", user_id="local", attachments=files)
                reply: Reply = run(
                    agent.handle(event, sink=sink),
                    stop=lambda: agent.stop_run(key, "repl:local"),
                    wait=lambda future: typed.wait(future, aside),
                )
                return reply.text

            where = f"{agent.name} ({agent.spec.model.name}), conversation repl:{args.session}"
            return _repl(where, say, typed)
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

    def run(coro: Any, stop: Callable[[], Any] | None = None, wait: Callable[..., Any] | None = None) -> Any:
        """`coro`'s result (through `wait`, which may read the terminal meanwhile); on Ctrl-C, `stop()`
        (a coroutine) is run and `coro` then answers (a stopped run's reply), or without `stop` it is
        cancelled and the Ctrl-C goes on."""
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            return wait(future) if wait is not None else future.result()
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


def _repl(where: str, say: Say, typed: Typeahead) -> int:
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
                line = typed.next_line("you> " if interactive else "")
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
                else:  # whole, but a tool server's question is printed while the turn waits on it
                    reply = say(line, files, PrintedProgress())
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
