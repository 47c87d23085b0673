"""What the CLI prints from an agent's data: the audit trail, runs, memories, the inspector."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from agentd.config.loader import parse_daemon
from agentd.daemon.resources import DAEMON_STORE, Resources
from agentd.messages import MESSAGE_ADAPTER, render_message
from agentd.store.queries import AuditEvents, Memories, Query, Runs

T = TypeVar("T")


def read_agent_data(args: argparse.Namespace, query: Query[T]) -> T:
    """Answer one query from args.agent's data, read-only (safe beside a running daemon)."""
    answer = _read(args, args.agent, query)
    if answer is None:
        raise SystemExit(
            f"agentd: no data file {_data_file(args, args.agent)} (has agent {args.agent!r} run yet?)"
        )
    return answer[0]


def _data_file(args: argparse.Namespace, name: str) -> Path:
    return args.data / f"{name}.sqlite"


def _read(args: argparse.Namespace, name: str, query: Query[T]) -> tuple[T] | None:
    """The answer from the store `name` (an agent's, or the daemon's own), read-only; None when it has
    no data file."""
    if not _data_file(args, name).exists():
        return None
    settings = parse_daemon(args.agents.parent / "agentd.yaml")

    async def go() -> T:
        async with Resources(settings, args.data) as resources:
            store = resources.store(name, readonly=True)
            await store.open()
            try:
                return await store.read(query)
            finally:
                await store.close()

    return (asyncio.run(go()),)


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
    """The agent's own trail and the daemon's events about it (config: loaded, rejected, removed...),
    also once its file is gone."""
    query = AuditEvents(args.agent, args.kind, None, args.limit)
    own, daemons = _read(args, args.agent, query), _read(args, DAEMON_STORE, query)
    if own is None and not (daemons and daemons[0]):
        raise SystemExit(f"agentd: no audit events of agent {args.agent!r} in {args.data}")
    rows = sorted([*(own[0] if own else []), *(daemons[0] if daemons else [])], key=lambda r: r["ts"])
    rows = rows[-args.limit :]
    return _print_rows(
        rows,
        args.json,
        lambda r: (
            f"{_time(r['ts'])}  {r['kind']:<10} {r['action']:<10} {r['conversation_key'] or '-':<24} {json.dumps(r['data'])}"
        ),
    )


def cmd_runs(args: argparse.Namespace) -> int:
    rows = read_agent_data(args, Runs(args.conversation, args.limit))
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
    rows = read_agent_data(args, Memories())
    return _print_rows(
        rows,
        args.json,
        lambda r: (
            f"{(r['scope'] + ' ') if r['scope'] else ''}{r['key']}: {r['value']}  (updated {_time(r['updated_at'])})"
        ),  # type: ignore[arg-type]
    )


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
    fields = {k: v for k, v in message.items() if k != "seq"}  # state layers number their messages
    return render_message(MESSAGE_ADAPTER.validate_python(fields)).replace("\n", "\n    ")
