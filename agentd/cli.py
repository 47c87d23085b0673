"""The `agentd` command: thin — parse, call, print."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sqlite3
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentd.config import check_agents, find_agent_file, parse_agent, parse_daemon
from agentd.errors import AgentdError
from agentd.events import CONVERSATION_ID_RE, InboundEvent, is_conversation_key
from agentd.store.audit import query_audit
from agentd.store.memories import list_memories
from agentd.store.runs import list_runs


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help()
        return 2
    logging.basicConfig(
        level=logging.DEBUG if getattr(args, "verbose", False) else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for noisy in (
        "httpx",
        "discord",
        "telegram",
        "slack_bolt",
        "slack_sdk",
        "aiohttp.access",
        "uvicorn.access",
    ):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        code: int = args.func(args)
        return code
    except AgentdError as e:
        print(f"agentd: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="agentd", description="A daemon that hosts LLM agents defined in YAML.")
    sub = p.add_subparsers(metavar="COMMAND")

    def common(sp: argparse.ArgumentParser, data: bool = True) -> None:
        sp.add_argument(
            "--agents", type=Path, default=Path("agents"), help="agents folder (default: ./agents)"
        )
        if data:
            sp.add_argument("--data", type=Path, default=Path("data"), help="data folder (default: ./data)")

    run = sub.add_parser("run", help="run the daemon: every agent, its channels and the HTTP API")
    common(run)
    run.add_argument(
        "--config",
        type=Path,
        default=None,
        help="daemon settings (default: agentd.yaml beside the agents folder)",
    )
    run.add_argument("--host", default=None, help="HTTP host (default 127.0.0.1)")
    run.add_argument("--port", type=int, default=None, help="HTTP port (default 8765)")
    run.add_argument(
        "--reload-interval", type=float, default=1.0, help="seconds between checks of the agents folder"
    )
    run.add_argument("-v", "--verbose", action="store_true")
    run.set_defaults(func=cmd_run)

    chat = sub.add_parser("chat", help="talk to an agent in this terminal (conversation key repl:NAME)")
    chat.add_argument("agent")
    chat.add_argument("--session", default="local", help="session name (default: local)")
    common(chat)
    chat.add_argument("--config", type=Path, default=None)
    chat.set_defaults(func=cmd_chat)

    check = sub.add_parser("check", help="validate agentd.yaml and the agents as run would; exit 1 on errors")
    check.add_argument("dir", nargs="?", type=Path, default=Path("agents"), help="agents folder, or one file")
    check.add_argument("--config", type=Path, default=None)
    check.set_defaults(func=cmd_check)

    schema = sub.add_parser("schema", help="print the JSON schema of an agent file (or of agentd.yaml)")
    schema.add_argument("which", nargs="?", choices=["agent", "daemon"], default="agent")
    schema.set_defaults(func=cmd_schema)

    audit = sub.add_parser("audit", help="print an agent's audit trail")
    audit.add_argument("agent")
    audit.add_argument("--kind", default=None)
    audit.add_argument("--limit", type=int, default=50)
    audit.add_argument("--json", action="store_true")
    common(audit)
    audit.set_defaults(func=cmd_audit)

    runs = sub.add_parser("runs", help="print an agent's runs")
    runs.add_argument("agent")
    runs.add_argument("--conversation", default=None, help="only this conversation key")
    runs.add_argument("--limit", type=int, default=50)
    runs.add_argument("--json", action="store_true")
    common(runs)
    runs.set_defaults(func=cmd_runs)

    memories = sub.add_parser("memories", help="print an agent's persistent memories")
    memories.add_argument("agent")
    memories.add_argument("--json", action="store_true")
    common(memories)
    memories.set_defaults(func=cmd_memories)

    inspect = sub.add_parser(
        "inspect", help="print, per memory layer, what an agent's model will see next in a conversation"
    )
    inspect.add_argument("agent")
    inspect.add_argument("key", help="conversation key, e.g. webhook:ticket-7 or repl:local")
    inspect.add_argument("--json", action="store_true")
    common(inspect)
    inspect.add_argument("--config", type=Path, default=None)
    inspect.set_defaults(func=cmd_inspect)
    return p


def cmd_run(args: argparse.Namespace) -> int:
    from agentd.daemon import Daemon

    async def go() -> None:
        daemon = Daemon(
            args.agents,
            args.data,
            daemon_file=args.config,
            host=args.host,
            port=args.port,
            reload_interval=args.reload_interval,
        )
        await daemon.serve()

    asyncio.run(go())
    return 0


def schema_text(which: str) -> str:
    from agentd.config.models import AgentSpec, DaemonSpec

    schema = (AgentSpec if which == "agent" else DaemonSpec).model_json_schema()
    if which == "agent":
        # the name is the file name, never a key in the file
        schema["properties"].pop("name", None)
        schema["required"] = [r for r in schema.get("required", []) if r != "name"]
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def cmd_schema(args: argparse.Namespace) -> int:
    sys.stdout.write(schema_text(args.which))
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from agentd.providers.embedders import check_embedder

    result = check_agents(args.dir, args.config, check_embedder)
    for error in result.errors:
        print(error, file=sys.stderr)
    if result.errors:
        print(f"{len(result.errors)} file(s) with errors", file=sys.stderr)
        return 1
    print(f"ok: {len(result.agents)} agent(s): {', '.join(a.name for a in result.agents) or 'none'}")
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    from agentd.engine.runtime import AgentRuntime
    from agentd.providers.registry import ProviderRegistry
    from agentd.store.db import AgentStore, StoreExecutor

    if not CONVERSATION_ID_RE.match(args.session):
        print("agentd: --session must be 1-128 of [A-Za-z0-9_.:-]", file=sys.stderr)
        return 2
    path = find_agent_file(args.agents, args.agent)
    if path is None:
        print(f"agentd: no agent file {args.agents / args.agent}.yaml", file=sys.stderr)
        return 1
    settings = parse_daemon(args.config if args.config is not None else args.agents.parent / "agentd.yaml")
    spec = parse_agent(path, default_model=settings.defaults.model)
    key = f"repl:{args.session}"

    async def go() -> None:
        executor = StoreExecutor()
        providers = ProviderRegistry(settings.providers)
        runtime = AgentRuntime(spec, AgentStore(args.data / f"{spec.name}.sqlite", executor), providers)
        await runtime.start()
        print(
            f"agentd chat: {spec.name} ({spec.model.name}), conversation {key}. /help for commands, Ctrl-D to quit."
        )
        loop = asyncio.get_running_loop()
        try:
            while True:
                line = await loop.run_in_executor(None, _read_line)
                if line is None:
                    break
                if not line.strip():
                    continue
                reply = await runtime.handle(InboundEvent(spec.name, key, line, "repl", user_id="local"))
                print(reply.text, flush=True)
        finally:
            await runtime.close()
            await providers.aclose()
            executor.shutdown()

    asyncio.run(go())
    return 0


def _read_line() -> str | None:
    try:
        return input("you> " if sys.stdin.isatty() else "")
    except EOFError:
        return None


def _open_readonly(args: argparse.Namespace) -> sqlite3.Connection:
    path = args.data / f"{args.agent}.sqlite"
    if not path.exists():
        raise SystemExit(f"agentd: no data file {path} (has agent {args.agent!r} run yet?)")
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def _print_rows(rows: list[dict[str, Any]], as_json: bool, line: Callable[[dict[str, Any]], str]) -> int:
    if as_json:
        print(json.dumps(rows, indent=2, default=str))
    else:
        for row in rows:
            print(line(row))
        if not rows:
            print("(none)")
    return 0


def _time(ts: float | None) -> str:
    return "-" if ts is None else datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


def cmd_audit(args: argparse.Namespace) -> int:
    with _open_readonly(args) as conn:
        rows = query_audit(conn, kind=args.kind, limit=args.limit)
    return _print_rows(
        rows,
        args.json,
        lambda r: (
            f"{_time(r['ts'])}  {r['kind']:<10} {r['action']:<10} {r['conversation_key'] or '-':<24} {json.dumps(r['data'])}"
        ),
    )


def cmd_runs(args: argparse.Namespace) -> int:
    with _open_readonly(args) as conn:
        rows = list_runs(conn, args.conversation, args.limit)
    return _print_rows(
        rows,
        args.json,
        lambda r: (
            f"{_time(r['started_at'])}  {r['id'][:12]}  {r['trigger']:<10} {r['status']:<5} "
            f"{r['conversation_key'] or '-':<24} in={r['input_tokens']}{'~' if r['tokens_estimated'] else ''} "
            f"out={r['output_tokens']} {r['duration_ms'] or 0:.1f}ms {r['error'] or ''}"
        ),
    )


def cmd_memories(args: argparse.Namespace) -> int:
    with _open_readonly(args) as conn:
        rows = list_memories(conn)
    return _print_rows(
        rows,
        args.json,
        lambda r: (
            f"{(r['scope'] + ' ') if r['scope'] else ''}{r['key']}: {r['value']}  (updated {_time(r['updated_at'])})"
        ),  # type: ignore[arg-type]
    )


def cmd_inspect(args: argparse.Namespace) -> int:
    import httpx

    from agentd.engine.runtime import AgentRuntime
    from agentd.http.inspector import inspect_conversation
    from agentd.providers.embedders import build_embedder
    from agentd.providers.registry import ProviderRegistry
    from agentd.store.db import AgentStore, StoreExecutor

    if not is_conversation_key(args.key):
        print(
            f"agentd: {args.key!r} is not a conversation key (<channel>:<id>, e.g. webhook:t-1)",
            file=sys.stderr,
        )
        return 2
    path = find_agent_file(args.agents, args.agent)
    if path is None:
        print(f"agentd: no agent file {args.agents / args.agent}.yaml", file=sys.stderr)
        return 1
    data_file = args.data / f"{args.agent}.sqlite"
    if not data_file.exists():  # opening it would create an empty file
        print(f"agentd: no data file {data_file} (has agent {args.agent!r} run yet?)", file=sys.stderr)
        return 1
    settings = parse_daemon(args.config if args.config is not None else args.agents.parent / "agentd.yaml")
    spec = parse_agent(path, default_model=settings.defaults.model)

    async def go() -> dict[str, Any]:
        # The agent opened in-process, as the daemon would, so each strategy describes itself.
        executor = StoreExecutor()
        client = httpx.AsyncClient()
        providers = ProviderRegistry(settings.providers, client)
        try:
            embedder = (
                build_embedder(settings.embedder, settings.providers, client) if settings.embedder else None
            )
            runtime = AgentRuntime(
                spec,
                AgentStore(data_file, executor, settings.store.synchronous),
                providers,
                embedder=embedder,
                memory_extractor_model=settings.memory_extractor_model,
            )
            await runtime.start()
            try:
                return await inspect_conversation(runtime, args.key)
            finally:
                await runtime.close()
        finally:
            await providers.aclose()
            executor.shutdown()

    inspected = asyncio.run(go())
    if args.json:
        print(json.dumps(inspected, indent=2, ensure_ascii=False, default=str))
    else:
        print(render_inspection(inspected))
    return 0


def render_inspection(inspected: dict[str, Any]) -> str:
    """The inspector as text: a header, then each layer's fields in the order the strategy gave them."""
    thread = inspected.get("thread_id")
    lines = [
        f"agent {inspected['agent']} · conversation {inspected['conversation_key']} · "
        f"strategy {inspected['strategy']} · thread {thread if thread is not None else '(none yet)'}"
    ]
    for layer in inspected["layers"]:
        name, kind = layer.get("layer"), layer.get("kind")
        lines += [
            "",
            f"== layer {name} ({kind}) ==" if name and name != kind else f"== layer {kind or name} ==",
        ]
        for key, value in layer.items():
            if key not in ("kind", "layer"):
                lines += _text_field(key, value, "")
    if "persistent" in inspected:
        lines += ["", "== persistent memory =="]
        for key, value in inspected["persistent"].items():
            lines += _text_field(key, value, "")
    return "\n".join(lines)


def _text_field(key: str, value: Any, indent: str) -> list[str]:
    if isinstance(value, list) and value and all(_is_message(v) for v in value):
        return [f"{indent}{key}:"] + [f"{indent}  {_message_line(m)}" for m in value]
    if isinstance(value, dict) and value:
        out = [f"{indent}{key}:"]
        for k, v in value.items():
            out += _text_field(str(k), v, indent + "  ")
        return out
    if isinstance(value, list) and value:
        return [f"{indent}{key}:"] + [
            f"{indent}  - {json.dumps(v, ensure_ascii=False, default=str) if not isinstance(v, str) else v}"
            for v in value
        ]
    if isinstance(value, str) and "\n" in value:
        return [f"{indent}{key}:"] + [f"{indent}  | {line}" for line in value.splitlines()]
    if (
        (key == "at" or key.endswith("_at"))
        and isinstance(value, int | float)
        and not isinstance(value, bool)
    ):
        return [f"{indent}{key}: {_time(value)} UTC"]  # strategies report times as epoch seconds
    shown = "-" if value is None or value == [] or value == {} else value
    return [f"{indent}{key}: {shown}"]


def _is_message(value: Any) -> bool:
    return isinstance(value, dict) and "role" in value and "parts" in value


def _message_line(message: dict[str, Any]) -> str:
    pieces = []
    for part in message.get("parts", ()):
        if part.get("kind") == "text":
            pieces.append(part.get("text", ""))
        elif part.get("kind") == "tool_call":
            pieces.append(
                f"-> {part.get('name')}({json.dumps(part.get('arguments', {}), ensure_ascii=False)})"
            )
        else:
            flag = " (error)" if part.get("is_error") else ""
            pieces.append(f"<- {part.get('name')}{flag}: {part.get('content')}")
    who = f" ({message['user_id']})" if message.get("user_id") else ""
    return f"{message.get('role')}{who}: " + " ".join(pieces).replace("\n", "\n    ")


if __name__ == "__main__":
    sys.exit(main())
