"""`agentd store copy`: moving up from SQLite files to a PostgreSQL database (agentd/store/copy.py).

Progress goes to stderr, a line per agent and table as it is copied and checked; the outcome per agent
to stdout. Exit 1 when any agent was refused (it changed nothing; the others were copied).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentd.errors import OperatorError

if TYPE_CHECKING:
    from agentd.store.copy_chain import ChainCopy

# agentd.daemon.resources.STORE_URL_ENV, spelled out: importing the daemon to build the parser would cost
# every command its start-up time (tests/test_cli_startup.py checks the two agree)
STORE_URL_ENV = "AGENTD_STORE_URL"


def add_store_parser(sub: Any) -> None:
    store = sub.add_parser("store", help="the store itself: copy SQLite files into PostgreSQL")
    actions = store.add_subparsers(metavar="ACTION")
    copy = actions.add_parser(
        "copy",
        help="copy every agent's SQLite file (and the daemon's trail) into a PostgreSQL database",
        description="Copy each <agent>.sqlite of the data folder into the database: idempotent (a second "
        "run copies nothing twice), refusing rows the database holds differently, verifying each table.",
    )
    copy.add_argument("names", nargs="*", metavar="AGENT", help="only these agents (default: every file)")
    copy.add_argument(
        "--to",
        default=None,
        metavar="URL",
        help=f"postgresql://… (default: store.url of agentd.yaml, else {STORE_URL_ENV})",
    )
    copy.add_argument("--agents", type=Path, default=Path("agents"), help="agents folder (default: ./agents)")
    copy.add_argument("--data", type=Path, default=Path("data"), help="data folder (default: ./data)")
    copy.add_argument(
        "--config", type=Path, default=None, help="default: agentd.yaml beside the agents folder"
    )
    copy.set_defaults(func=cmd_store_copy)
    store.set_defaults(func=lambda args: store.print_help() or 2)


def cmd_store_copy(args: argparse.Namespace) -> int:
    from agentd.cli.settings import settings_of
    from agentd.store.folder_lock import probe

    url = args.to or settings_of(args).store.url or os.environ.get(STORE_URL_ENV)
    if not url:
        raise OperatorError(
            f"say which database to copy into: --to postgresql://… (or store.url in agentd.yaml, or {STORE_URL_ENV})"
        )
    try:
        from agentd.store.copy import copy_folder
        from agentd.store.postgres.connection import label_of
    except ImportError as e:
        raise OperatorError(
            f"copying needs the PostgreSQL driver ({e}): pip install 'agentd[postgres]'"
        ) from None
    holder = probe(args.data)
    if holder is not None:
        print(
            f"agentd: warning: a daemon (pid {holder.pid}) is running on {args.data}: each file is copied as it "
            "is now, what the daemon writes later is not, and a later copy refuses the rows it changes: stop it "
            "first",
            file=sys.stderr,
        )
    where = label_of(url)
    shown: set[str] = set()

    def progress(agent: str, t: Any) -> None:
        if agent not in shown:
            shown.add(agent)
            print(f"{agent}: copying into {where}", file=sys.stderr)
        note = f", {t.changed_since} changed in the database since (kept)" if t.changed_since else ""
        note += f", {t.deleted_since} deleted in the database since (left deleted)" if t.deleted_since else ""
        print(
            f"  {agent}: {t.table:<15} {t.in_file:>7} in the file: {t.copied} copied, {t.already} already there"
            f"{note}; verified {t.verified} (sha256 {t.digest[:12]})",
            file=sys.stderr,
            flush=True,
        )

    results = copy_folder(args.data, url, args.names, progress)
    refused = 0
    for r in results:
        migrated = f" (its file migrated first: {', '.join(r.migrated)})" if r.migrated else ""
        if r.refused is not None:
            refused += 1
            print(f"{r.agent}: refused, nothing of it copied: {r.refused}")
            print(f"{r.agent}: to recover: {recovery(r.agent, r.refused)}")
        elif r.copied:
            print(
                f"{r.agent}: copied {r.copied} rows, {r.already} already there; every table verified "
                f"(row counts and sha256 of the rows){migrated}"
            )
        else:
            print(f"{r.agent}: nothing new: all {r.already} rows already there, verified{migrated}")
        if r.chain is not None:
            print(f"{r.agent}: {chain_note(r.chain)}")
        if r.links is not None:
            print(f"{r.agent}: {links_note(r.links)}")
    copied = sum(r.copied for r in results)
    print(f"{len(results) - refused} of {len(results)} agent(s) into {where}: {copied} rows copied")
    return 1 if refused else 0


def links_note(links: Any) -> str:
    """What became of the daemon's links (accounts linked into one person)."""
    note = f"links: {links.in_file} in the file: {links.copied} copied, {links.already} already there"
    for account, person, held in links.elsewhere:
        note += f"; {account} (of {person} in the file) is {held}'s in the database: left so"
    return note


def recovery(agent: str, refused: str) -> str:
    """What to do about a refused agent (nothing of it was copied, so every way is still open)."""
    again = f"then `agentd store copy {agent}` again (nothing already copied is copied twice)"
    if "does not verify" in refused:
        how = (
            f"`agentd audit verify {agent}` shows where its trail breaks; restore the file from a backup taken "
            "before the break"
        )
    elif "since it was copied" in refused or "a different row" in refused:
        how = (
            "the file and the database were both written after the first copy; either keep the database "
            "(it is already complete up to that copy: serve the agent from it and retire the file), or copy "
            "the file into an empty database (--to another URL) and serve from that one"
        )
    elif "unknown" in refused or "newer" in refused:
        return "the file was written by a newer agentd: copy it with that version (or a later one)"
    elif "cannot read" in refused:
        how = "check that the file is an agentd SQLite file readable by this user"
    else:
        how = "fix what it names"
    return f"{how}; {again}"


def chain_note(chain: ChainCopy) -> str:
    """Where the file's audit events went in the agent's chain in the database (agentd/store/copy_chain.py):
    as they were, or re-linked after the database's own events, with both heads to tie the two."""
    (last, file_hash), (seq, head) = chain.file_head, chain.head
    if chain.kept:
        return f"audit events {chain.file_first}..{last} chained as in the file; head {seq} {head}"
    return (
        f"audit events {chain.file_first}..{last} of the file (its head: {last} {file_hash}) follow the "
        f"database's event {chain.after}, re-linked as events {chain.after + 1}..{seq}; head {seq} {head}"
    )
