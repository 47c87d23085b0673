"""The `agentd` command: thin — parse, call, print.

A command imports what it uses when it runs (`_lazy`), not when the parser is built: the daemon, the
engine, the MCP SDK and numpy took ~1.3 s to import, which every command — `--version` too — paid.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentd import __version__
from agentd.cli.logs import LOG_FORMATS, LOG_LEVELS, configure_logging
from agentd.cli.pipes import quiet_on_closed_pipe
from agentd.cli.store import add_store_parser
from agentd.errors import AgentdError

if TYPE_CHECKING:
    from agentd.config.folder import CheckResult

Command = Callable[[argparse.Namespace], int]


def _lazy(where: str) -> Command:
    """`module:function`, imported at the call."""
    module, name = where.split(":")

    def command(args: argparse.Namespace) -> int:
        func: Command = getattr(importlib.import_module(module), name)
        return func(args)

    return command


cmd_chat = _lazy("agentd.cli.chat:cmd_chat")
cmd_init = _lazy("agentd.cli.init:cmd_init")
cmd_inspect = _lazy("agentd.cli.local:cmd_inspect")
cmd_forget_episodes = _lazy("agentd.cli.local:cmd_forget_episodes")
cmd_person_export = _lazy("agentd.cli.people:cmd_person_export")
cmd_person_erase = _lazy("agentd.cli.people:cmd_person_erase")
cmd_person_link = _lazy("agentd.cli.links:cmd_person_link")
cmd_person_unlink = _lazy("agentd.cli.links:cmd_person_unlink")
cmd_person_show = _lazy("agentd.cli.links:cmd_person_show")
cmd_audit = _lazy("agentd.cli.reports:cmd_audit")
cmd_runs = _lazy("agentd.cli.reports:cmd_runs")
cmd_memories = _lazy("agentd.cli.reports:cmd_memories")
cmd_audit_verify = _lazy("agentd.cli.audit:cmd_audit_verify")
cmd_audit_export = _lazy("agentd.cli.audit:cmd_audit_export")
cmd_tools = _lazy("agentd.cli.tools:cmd_tools")
cmd_usage = _lazy("agentd.cli.usage:cmd_usage")
cmd_jobs = _lazy("agentd.cli.jobs:cmd_jobs")


def main(argv: list[str] | None = None) -> int:
    with quiet_on_closed_pipe():
        return _main(argv)
    return 141  # stdout's reader went away (`agentd audit export | head`): 128 + SIGPIPE, as a shell reports


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help()
        return 2
    level = "debug" if getattr(args, "verbose", False) else getattr(args, "log_level", "info")
    configure_logging(level, getattr(args, "log_format", "text"))
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
    p.add_argument("--version", action="version", version=f"agentd {__version__}")
    sub = p.add_subparsers(metavar="COMMAND")

    def common(sp: argparse.ArgumentParser, data: bool = True) -> None:
        sp.add_argument(
            "--agents", type=Path, default=Path("agents"), help="agents folder (default: ./agents)"
        )
        if data:
            sp.add_argument("--data", type=Path, default=Path("data"), help="data folder (default: ./data)")

    init = sub.add_parser(
        "init", help="start a folder: agents/ with a commented example, agentd.yaml with every setting"
    )
    init.add_argument("dir", nargs="?", type=Path, default=Path("."), help="default: the current folder")
    init.set_defaults(func=cmd_init)

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
    run.add_argument("--log-level", choices=LOG_LEVELS, default="info", help="default: info")
    run.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="text",
        help="text (default), or json: one object per line with keys ts, level, logger, run_id, message, "
        "data, error",
    )
    run.add_argument("-v", "--verbose", action="store_true", help="the same as --log-level debug")
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

    audit = sub.add_parser(
        "audit",
        help="print an agent's audit trail (audit AGENT, or audit show AGENT for any name, verify and "
        "export included), verify the hash chains (audit verify [AGENT]) or export them as JSON lines "
        "(audit export [--since T] [--agent A] [-o FILE])",
    )
    audit.add_argument("what", metavar="AGENT | show AGENT | verify | export")
    audit.add_argument(
        "name", nargs="?", default=None, help="verify: only this agent's chain (_daemon: the daemon's)"
    )
    audit.add_argument("--kind", default=None, help="AGENT: only events of this kind")
    audit.add_argument("--limit", type=int, default=50, help="AGENT: the newest this many")
    audit.add_argument("--json", action="store_true")
    audit.add_argument("--since", default=None, help="export: from the first event at or after this time")
    audit.add_argument("--agent", default=None, help="export: only this agent's chain")
    audit.add_argument("-o", "--output", type=Path, default=None, help="export: write here (default: stdout)")
    common(audit)
    audit.add_argument("--config", type=Path, default=None)
    audit.set_defaults(func=cmd_audit_any)

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

    tools = sub.add_parser("tools", help="list an agent's tools with their source and the policy's decision")
    tools.add_argument("agent")
    tools.add_argument("--json", action="store_true")
    common(tools)
    tools.add_argument("--config", type=Path, default=None)
    tools.set_defaults(func=cmd_tools)

    jobs = sub.add_parser(
        "jobs", help="list an agent's scheduled jobs, or one job with its fires and deliveries"
    )
    jobs.add_argument("agent")
    jobs.add_argument("job", nargs="?", default=None, help="one job's id: its fires and deliveries too")
    jobs.add_argument("--all", action="store_true", help="cancelled and done jobs too")
    jobs.add_argument("--conversation", default=None, help="only this conversation key's jobs")
    jobs.add_argument("--json", action="store_true")
    common(jobs)
    jobs.add_argument("--config", type=Path, default=None)
    jobs.set_defaults(func=cmd_jobs)

    person = sub.add_parser(
        "person",
        help="a data-subject request across every agent: export USER (one JSON document) or erase USER; "
        "a person's linked accounts: link PERSON ACCOUNT..., unlink PERSON ACCOUNT..., show NAME",
    )
    person_commands = {
        "export": cmd_person_export,
        "erase": cmd_person_erase,
        "link": cmd_person_link,
        "unlink": cmd_person_unlink,
        "show": cmd_person_show,
    }
    person.add_argument("action", choices=list(person_commands))
    person.add_argument(
        "user_id", help="the person's user id as the channels give it, or a linked person's name"
    )
    person.add_argument("accounts", nargs="*", help="link, unlink: the accounts (telegram:42, slack:U012AB)")
    person.add_argument(
        "-o", "--output", type=Path, default=None, help="export: write here (default: stdout)"
    )
    common(person)
    person.add_argument("--config", type=Path, default=None)
    person.set_defaults(func=lambda a: person_commands[a.action](_one_name(a)))

    forget = sub.add_parser(
        "forget-episodes", help="delete every episode of one person (audited, for data-subject requests)"
    )
    forget.add_argument("agent")
    forget.add_argument("user_id", help="the person's user id, as the channels give it")
    common(forget)
    forget.add_argument("--config", type=Path, default=None)
    forget.set_defaults(func=cmd_forget_episodes)
    add_store_parser(sub)
    add_usage_parser(sub)
    return p


def _one_name(args: argparse.Namespace) -> argparse.Namespace:
    """export, erase and show take one name: a second would be silently left out otherwise."""
    if args.accounts and args.action not in ("link", "unlink"):
        raise AgentdError(f"person {args.action} takes one user id or name, not {' '.join(args.accounts)}")
    return args


def add_usage_parser(sub: Any) -> None:
    """`agentd usage` (agentd/cli/usage.py)."""
    usage = sub.add_parser(
        "usage", help="print tokens and spend per day (or agent, person, ...), the top people and agents"
    )
    usage.add_argument("--agent", default=None, help="only this agent")
    usage.add_argument("--person", default=None, help="only this person (or account <channel>:<user id>)")
    usage.add_argument("--channel", default=None, help="only this channel")
    usage.add_argument(
        "--since", type=date.fromisoformat, default=None, help="from this UTC day (YYYY-MM-DD)"
    )
    usage.add_argument("--until", type=date.fromisoformat, default=None, help="to this UTC day, included")
    usage.add_argument(
        "--group-by", choices=["day", "agent", "person", "channel", "model", "trigger"], default="day"
    )
    usage.add_argument("--json", action="store_true")
    usage.add_argument(
        "--agents", type=Path, default=Path("agents"), help="agents folder (default: ./agents)"
    )
    usage.add_argument("--data", type=Path, default=Path("data"), help="data folder (default: ./data)")
    usage.add_argument("--config", type=Path, default=None)
    usage.set_defaults(func=cmd_usage)


def cmd_audit_any(args: argparse.Namespace) -> int:
    """`audit verify` and `audit export` are commands; any other word is an agent whose trail is printed
    (`agentd audit show verify` prints an agent named verify)."""
    if args.what == "verify":
        return cmd_audit_verify(args)
    if args.what == "export":
        return cmd_audit_export(args)
    if args.what == "show":
        if args.name is None:
            raise AgentdError("audit show: name the agent")
        args.what = args.name
    args.agent = args.what
    return cmd_audit(args)


def cmd_run(args: argparse.Namespace) -> int:
    import asyncio

    from agentd.cli.logs import log_uncaught
    from agentd.daemon import Daemon
    from agentd.daemon.limits import raise_open_files_limit
    from agentd.daemon.server import event_loop_factory

    if args.log_format == "json":
        log_uncaught()

    raise_open_files_limit()

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

    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        runner.run(go())
    return 0


def schema_text(which: str) -> str:
    from agentd.config.models import AgentSpec, DaemonSpec

    schema = (AgentSpec if which == "agent" else DaemonSpec).model_json_schema()
    # pydantic writes Draft 2020-12 ($defs, prefixItems): said, so an editor does not assume draft-07
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    if which == "agent":
        # the name is the file name, never a key in the file
        schema["properties"].pop("name", None)
        schema["required"] = [r for r in schema.get("required", []) if r != "name"]
        # an empty (or all-comment) agent file is refused: an agent needs at least its purpose
        schema["minProperties"] = 1
    else:
        # an all-comment agentd.yaml (what `agentd init` writes) is YAML null: every default
        schema["type"] = ["object", "null"]
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def cmd_schema(args: argparse.Namespace) -> int:
    sys.stdout.write(schema_text(args.which))
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from agentd.config.folder import check_agents
    from agentd.providers.embedders import check_embedder

    result = check_agents(args.dir, args.config, check_embedder)
    for warning in result.warnings + _agent_warnings(result):
        print(f"warning: {warning}", file=sys.stderr)
    for error in result.errors:
        print(error, file=sys.stderr)
    if result.errors:
        print(f"{len(result.errors)} file(s) with errors", file=sys.stderr)
        return 1
    print(f"ok: {len(result.agents)} agent(s): {', '.join(a.name for a in result.agents) or 'none'}")
    return 0


def _agent_warnings(result: CheckResult) -> list[str]:
    """What `GET /agents` shows under each agent's `warnings` once `agentd run` loads it (a used provider
    with no key, memory that will do less than it says), per agent file."""
    import httpx

    from agentd.daemon.provider_checks import agent_warnings
    from agentd.providers.registry import ProviderRegistry

    if result.settings is None:
        return []
    # the providers are built to ask them about their keys, never called: the client opens nothing, and
    # has nothing to close (an event loop may be running here, as when a test calls the CLI)
    providers = ProviderRegistry(result.settings.providers, httpx.AsyncClient())
    return [
        f"{result.files[spec.name]}: {warning}"
        for spec in result.agents
        for warning in agent_warnings(spec, result.settings, providers)
    ]
