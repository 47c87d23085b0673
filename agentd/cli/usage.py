"""`agentd usage`: what GET /usage answers, read from the daemon's own store (read-only, so safe beside
running daemons; on PostgreSQL every daemon's usage)."""

from __future__ import annotations

import argparse
import asyncio
import json
from datetime import UTC, date, datetime, timedelta
from typing import Any

from agentd.cli.settings import settings_of
from agentd.config.budgets import price_table
from agentd.daemon.resources import DAEMON_STORE, Resources
from agentd.engine.metering import Meter
from agentd.engine.usage import money, report
from agentd.errors import NotStored


def cmd_usage(args: argparse.Namespace) -> int:
    settings = settings_of(args)
    until = args.until or datetime.now(UTC).date()
    since = args.since or (until - timedelta(days=29) if (until - date.min).days >= 29 else date.min)
    if since > until:
        raise SystemExit(f"agentd: --since ({since}) is after --until ({until})")

    async def read() -> dict[str, Any] | None:
        async with Resources(settings, args.data) as resources:
            store = resources.store(DAEMON_STORE, readonly=True)
            try:
                await store.open()
            except NotStored:
                return None
            try:
                meter = Meter(store, settings.budgets, price_table(settings.prices))
                return await report(
                    meter,
                    since,
                    until,
                    agent=args.agent,
                    person=args.person,
                    channel=args.channel,
                    group_by=args.group_by,
                )
            finally:
                await store.close()

    found = asyncio.run(read())
    if found is None:
        print("(no usage yet: the daemon has not run here)")
        return 0
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    by = args.group_by
    print(f"usage {found['since']} .. {found['until']} (UTC days), by {by}; ~ marks estimated counts")
    for row in [*found["groups"], {by: "total", **found["total"]}]:
        mark = "~" if row["estimated"] else " "
        print(
            f"{row[by] or '-':<28} {row['calls']:>7} calls {row['input_tokens']:>11,} in {row['output_tokens']:>11,} out"
            f" {money(row['cost']):>10}{mark}"
        )
    for near in found["near_limit"]:
        print(
            f"near a limit: {near['per']} {near['subject']}: {near['used']} of {near['limit']} ({near['ratio']:.0%})"
        )
    return 0
