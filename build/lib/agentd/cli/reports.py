"""What the CLI prints from an agent's data: the audit trail, runs, memories, the inspector."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from agentd.cli.settings import settings_of
from agentd.daemon.resources import DAEMON_STORE, Resources
from agentd.errors import NotStored
from agentd.messages import MESSAGE_ADAPTER, render_message
from agentd.store.queries import AuditEvents, Memories, Query, Runs

T = TypeVar("T")


def read_agent_data(args: argparse.Namespace, query: Query[T]) -> T:
    """Answer one query from args.agent's data, read-only (safe beside running daemons)."""
    [answer] = _read(args, [args.agent], query)
    if isinstance(answer, NotStored):
        raise SystemExit(f"agentd: {answer} (has agent {args.agent!r} run yet?)")
    return answer


def _read(args: argparse.Namespace, names: list[str], query: Query[T]) -> list[T | NotStored]:
    """The answer from each store of `names` (an agent's, or the daemon's own), read-only: its SQLite
    file in the data folder, or its rows in the PostgreSQL database of agentd.yaml's store.url (or
    AGENTD_STORE_URL). NotStored for a store holding nothing yet; nothing is ever created."""
    settings = settings_of(args)

    async def answer(resources: Resources, name: str) -> T | NotStored:
        store = resources.store(name, readonly=True)
        try:
            await store.open()
        except NotStored as e:
            return e
        try:
            return await store.read(query)
        finally:
            await store.close()

    async def go() -> list[T | NotStored]:
        async with Resources(settings, args.data) as resources:
            return [await answer(resources, name) for name in names]

    return asyncio.run(go())


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
    own, daemons = _read(args, [args.agent, DAEMON_STORE], query)
    own_rows = [] if isinstance(own, NotStored) else own
    daemon_rows = [] if isinstance(daemons, NotStored) else daemons
    if isinstance(own, NotStored) and not daemon_rows:
        raise SystemExit(f"agentd: no audit events of agent {args.agent!r} ({own})")
    rows = sorted([*own_rows, *daemon_rows], key=lambda r: r["ts"])
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
