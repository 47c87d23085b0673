"""Scheduled jobs at scale: what 100,000 jobs cost a daemon at rest, and how late fires are under load.

    python bench/scheduler.py            # 1,000 agents x 100 jobs; fires at 1,000 a minute for 2 min
    python bench/scheduler.py --quick    # smoke run: 20 agents x 50 jobs; 1,000 a minute for 12 s

Two parts, each against the real `agentd run` (a child process, as bench/agents.py starts it):

* at rest: the same folder of agents, each with a `schedule:` block, started once without jobs and once
  with `--jobs` jobs in all (due months from now) — seconds to the first /healthz, RSS after start, and
  the daemon's CPU while idle for `--idle-s` (with no polling of all jobs this stays near zero).
* fire lateness: reminders due at `--rate` a minute over `--fire-minutes`, spread over `--fire-agents`
  agents, delivered by signed webhook to a receiver in this process — on SQLite, and on PostgreSQL
  (a throwaway server, testkit/postgres.py) with one daemon and with two. Lateness is the fire's start
  (its record in the store) and the receiver's arrival, each minus the scheduled time; every fire and
  every delivery is checked to happen exactly once.

Markdown on stdout, progress on stderr, raw numbers in bench/results/scheduler-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import http.server
import json
import os
import shutil
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _common import log, pct, write_results  # bench/_common.py (puts the repository on the path)

from agentd.config.http_store import StoreSpec
from agentd.config.models import DaemonSpec
from agentd.daemon.resources import Resources
from agentd.engine.jobs import new_job_id, schedule_of
from agentd.schedule import When, parse_when
from agentd.store.job_queries import JobFires, Jobs
from agentd.store.job_records import JobRecord
from agentd.store.job_writes import InsertJob
from agents import HERE, DaemonRun, proc_status  # bench/agents.py: `agentd run` as a child process

SECRET = "bench-signing-secret-0123456789"
TICKS = os.sysconf("SC_CLK_TCK")
# idle, a daemon that wakes only for the next due fire uses well under 1% of a core whatever the
# number of jobs; one that polled every job would not
IDLE_CPU_LIMIT_PCT = 5.0


def agent_file(receiver: str) -> str:
    return (
        "purpose: You remind people.\n"
        f"channels: {{webhook: {{deliver_url: '{receiver}', signing_secret: {SECRET}}}}}\n"
        "schedule: {timezone: UTC}\n"
    )


def cpu_seconds(pid: int) -> float:
    """User + system CPU the process has used, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def make_root(parent: Path, label: str, agents: int, receiver: str, store_url: str | None) -> Path:
    root = Path(tempfile.mkdtemp(prefix=f"sched-{label}-", dir=parent))
    (root / "agents").mkdir()
    text = agent_file(receiver)
    for i in range(agents):
        (root / "agents" / f"a{i:04d}.yaml").write_text(text)
    if store_url:
        (root / "agentd.yaml").write_text(f"store: {{url: '{store_url}'}}\n")
    return root


def settings(store_url: str | None) -> DaemonSpec:
    return DaemonSpec(store=StoreSpec(url=store_url)) if store_url else DaemonSpec()


def job(spec: str | When, now: float, text: str, conversation: str = "webhook:bench") -> JobRecord:
    when = spec if isinstance(spec, When) else parse_when(spec, "UTC", now=now)
    return JobRecord(
        new_job_id(), None, conversation, conversation, None, None, "reminder", text,
        schedule_of(when), "UTC", "active", when.next_after(now), 0, now, now,
    )  # fmt: skip


async def insert_jobs(root: Path, store_url: str | None, jobs: dict[str, list[JobRecord]]) -> None:
    """The jobs written into each agent's store before its daemon starts (one transaction per agent)."""
    async with Resources(settings(store_url), root / "data") as resources:
        for name, rows in jobs.items():
            store = resources.store(name)
            await store.open()  # (made and migrated if new)
            try:
                if rows:
                    await store.write(*(InsertJob(j) for j in rows))
            finally:
                await store.close()


async def fires_of(
    root: Path, store_url: str | None, names: list[str]
) -> list[tuple[str, float, float, str | None]]:
    """(job id, scheduled time, started at, daemon) of every fire recorded, read back from the stores."""
    out = []
    async with Resources(settings(store_url), root / "data") as resources:
        for name in names:
            store = resources.store(name, readonly=True)
            await store.open()
            try:
                for j in await store.read(Jobs(ended=True, limit=100_000)):
                    out += [
                        (j.id, f.fire_at, f.started_at, f.daemon)
                        for f in await store.read(JobFires(j.id, 100))
                    ]
            finally:
                await store.close()
    return out


# -- at rest ------------------------------------------------------------------------------------------


def far_jobs(count: int, now: float, salt: int) -> list[JobRecord]:
    """Jobs due months from now, a mix of the three kinds of schedule."""
    specs = [
        "cron 0 9 1 1 *",
        "every 60d",
        f"at {time.strftime('%Y-%m-%dT%H:%M', time.gmtime(now + 200 * 86400))}",
    ]
    return [job(specs[(i + salt) % 3], now, f"job {i}") for i in range(count)]


def settle(pid: int, cap_s: float) -> float:
    """Seconds until the process is quiet (under 1% of a core for 3 s in a row), at most `cap_s`: after
    /healthz the schedulers still take their first look at every agent's store."""
    began, quiet = time.perf_counter(), 0
    while quiet < 3 and time.perf_counter() - began < cap_s:
        cpu0 = cpu_seconds(pid)
        time.sleep(1.0)
        quiet = quiet + 1 if cpu_seconds(pid) - cpu0 < 0.01 else 0
    return time.perf_counter() - began


def at_rest(args: argparse.Namespace, parent: Path) -> dict[str, Any]:
    root = make_root(parent, "rest", args.agents, "http://127.0.0.1:9/never", None)
    names = [f"a{i:04d}" for i in range(args.agents)]
    # both starts find every agent's file made and migrated: only the jobs differ
    asyncio.run(insert_jobs(root, None, {n: [] for n in names}))
    cells: dict[str, Any] = {}
    try:
        # a first start of a folder does work of its own (every agent's "loaded" audit event, say): it
        # is made once, unmeasured, so that both measured starts are restarts of the same folder
        for label in ("first start", "without jobs", "with jobs"):
            if label == "with jobs":
                per = args.jobs // args.agents
                log(f"at rest: writing {per * args.agents:,} jobs into {args.agents} agents")
                began = time.perf_counter()
                now = time.time()
                asyncio.run(insert_jobs(root, None, {n: far_jobs(per, now, i) for i, n in enumerate(names)}))
                cells["insert_s"] = time.perf_counter() - began
            run = DaemonRun(root, HERE, None)
            try:
                log(f"at rest, {label}: starting")
                start_s = run.start()
                assert run.proc is not None
                settled_s = settle(run.proc.pid, args.settle_s)
                if label == "first start":
                    cells["first_start_s"] = start_s + settled_s
                    continue
                after_start = proc_status(run.proc.pid)
                cpu0, wall0 = cpu_seconds(run.proc.pid), time.perf_counter()
                log(f"at rest, {label}: quiet {settled_s:.0f} s after /healthz; idle for {args.idle_s:g} s")
                time.sleep(args.idle_s)
                idle = (cpu_seconds(run.proc.pid) - cpu0) / (time.perf_counter() - wall0)
                cells[label] = {
                    "start_s": start_s,
                    "settled_s": settled_s,
                    "rss_mb": after_start["VmRSS"] / 1024,
                    "peak_rss_mb": proc_status(run.proc.pid)["VmHWM"] / 1024,
                    "fds": after_start["fds"],
                    "idle_cpu_pct": idle * 100,
                }
            finally:
                run.stop()
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return cells


# -- fire lateness ------------------------------------------------------------------------------------


class Receiver:
    """The webhook's receiver: each POST's id, job and arrival time, answered 204."""

    def __init__(self) -> None:
        self.got: list[tuple[str, str, float]] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                arrived = time.time()
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                receiver.got.append((self.headers["webhook-id"], body["data"]["job_id"], arrived))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


def lateness_cell(
    args: argparse.Namespace, parent: Path, label: str, store_url: str | None, daemons: int
) -> dict[str, Any]:
    receiver = Receiver()
    roots = [make_root(parent, f"fire{d}", args.fire_agents, receiver.url, store_url) for d in range(daemons)]
    names = [f"a{i:04d}" for i in range(args.fire_agents)]
    fires = int(args.rate * args.fire_minutes)
    t0 = time.time() + args.margin_s
    due: dict[str, float] = {}
    jobs: dict[str, list[JobRecord]] = {n: [] for n in names}
    now = time.time()
    for i in range(fires):
        at = t0 + i * 60.0 / args.rate
        # a When of its own: an `at` written as text is to the second, and these are 60 ms apart
        when = When("at", time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(at)), "UTC", at=at)
        row = job(when, now, f"fire {i}")
        due[row.id] = at
        jobs[names[i % len(names)]].append(row)
    cell: dict[str, Any] = {
        "daemons": daemons,
        "agents": args.fire_agents,
        "fires": fires,
        "rate_per_min": args.rate,
    }
    runs = [DaemonRun(root, HERE, None) for root in roots]
    try:
        asyncio.run(insert_jobs(roots[0], store_url, jobs))
        cell["start_s"] = [run.start() for run in runs]
        if time.time() > t0:
            cell["failed"] = (
                f"the daemons were up {time.time() - t0:.1f} s after the first fire: raise --margin-s"
            )
            return cell
        log(
            f"{label}: {fires} fires from {time.strftime('%H:%M:%S', time.localtime(t0))} over {args.fire_minutes:g} min"
        )
        last = max(due.values())
        deadline = last + args.drain_s
        while time.time() < deadline and len({j for _, j, _ in receiver.got}) < fires:
            time.sleep(0.5)
        time.sleep(1.0)  # a duplicate, if there is one, has its moment to arrive
    finally:
        for run in runs:
            run.stop()
        receiver.close()
    recorded = asyncio.run(fires_of(roots[0], store_url, names))
    per_job = Counter(j for j, *_ in recorded)
    fire_late = [started - due[j] for j, _, started, _ in recorded if j in due]
    delivered = Counter(j for _, j, _ in receiver.got)
    arrival: dict[str, float] = {}
    for _, j, arrived in receiver.got:
        arrival.setdefault(j, arrived)
    deliver_late = [arrival[j] - due[j] for j in arrival if j in due]
    cell |= {
        "fired": len(per_job),
        "fired_twice": sum(1 for c in per_job.values() if c > 1),
        "delivered": len(delivered),
        "delivered_twice": sum(1 for c in delivered.values() if c > 1),
        "fire_late_p50_ms": pct(fire_late, 50) * 1000,
        "fire_late_p99_ms": pct(fire_late, 99) * 1000,
        "fire_late_max_ms": max(fire_late, default=float("nan")) * 1000,
        "deliver_late_p50_ms": pct(deliver_late, 50) * 1000,
        "deliver_late_p99_ms": pct(deliver_late, 99) * 1000,
        "by_daemon": dict(Counter(d or "?" for *_, d in recorded)),
        # the latest fires: seconds after the first fire's time, how late, which daemon
        "latest": sorted(
            (
                (round(due[j] - t0, 3), round(started - due[j], 3), d)
                for j, _, started, d in recorded
                if j in due
            ),
            key=lambda f: -f[1],
        )[:20],
    }
    if not args.keep:
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)
    return cell


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a smoke run (numbers mean nothing)")
    ap.add_argument("--agents", type=int, default=None, help="at rest: agents (1,000; quick 20)")
    ap.add_argument("--jobs", type=int, default=None, help="at rest: jobs in all (100,000; quick 1,000)")
    ap.add_argument("--idle-s", type=float, default=None, help="at rest: seconds idle (60; quick 3)")
    ap.add_argument(
        "--settle-s", type=float, default=None, help="after start, before measuring (10; quick 2)"
    )
    ap.add_argument("--rate", type=float, default=1000.0, help="fires a minute")
    ap.add_argument("--fire-minutes", type=float, default=None, help="minutes of fires (2; quick 0.2)")
    ap.add_argument(
        "--fire-agents", type=int, default=None, help="agents the fires are spread over (100; quick 10)"
    )
    ap.add_argument(
        "--margin-s", type=float, default=None, help="from writing the jobs to the first fire (45; quick 20)"
    )
    ap.add_argument("--drain-s", type=float, default=60.0, help="waited after the last fire for deliveries")
    ap.add_argument(
        "--skip", default="", help="comma-separated: rest, sqlite, postgres (or postgres-1, postgres-2)"
    )
    ap.add_argument(
        "--dir", type=Path, default=None, help="where the folders are made (default: the temp dir)"
    )
    ap.add_argument("--keep", action="store_true", help="keep the folders")
    args = ap.parse_args()
    q = args.quick
    args.agents = args.agents or (20 if q else 1000)
    args.jobs = args.jobs or (1000 if q else 100_000)
    args.idle_s = args.idle_s if args.idle_s is not None else (3.0 if q else 60.0)
    args.settle_s = args.settle_s if args.settle_s is not None else (20.0 if q else 180.0)
    args.fire_minutes = args.fire_minutes or (0.2 if q else 2.0)
    args.fire_agents = args.fire_agents or (10 if q else 100)
    args.margin_s = args.margin_s or (20.0 if q else 45.0)
    skip = set(filter(None, args.skip.split(",")))
    parent = Path(tempfile.mkdtemp(prefix="bench-scheduler-", dir=args.dir))
    results: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    try:
        if "rest" not in skip:
            results["at_rest"] = at_rest(args, parent)
        cells: dict[str, Any] = {}
        if "sqlite" not in skip:
            cells["SQLite, 1 daemon"] = lateness_cell(args, parent, "SQLite", None, 1)
        if "postgres" not in skip:
            from testkit.postgres import PostgresServer

            for daemons in (1, 2):
                if f"postgres-{daemons}" in skip:
                    continue
                with PostgresServer(settings={"max_connections": "200"}) as server:
                    server.create_database("sched")
                    label = f"PostgreSQL, {daemons} daemon{'s' if daemons > 1 else ''}"
                    cells[label] = lateness_cell(args, parent, label, server.url("sched"), daemons)
        results["lateness"] = cells
    finally:
        if not args.keep:
            shutil.rmtree(parent, ignore_errors=True)
    path = write_results("scheduler", results)
    report(results, args)
    log(f"results: {path}")
    problems = [
        f"{label}: {c.get('failed') or ''} fired {c.get('fired')} of {c['fires']}, delivered {c.get('delivered')}, "
        f"twice: {c.get('fired_twice')} fired, {c.get('delivered_twice')} delivered"
        for label, c in results.get("lateness", {}).items()
        if c.get("failed")
        or c.get("fired") != c["fires"]
        or c.get("delivered") != c["fires"]
        or c.get("fired_twice")
        or c.get("delivered_twice")
    ]
    rest = results.get("at_rest", {}).get("with jobs")
    if rest is not None and rest["idle_cpu_pct"] > IDLE_CPU_LIMIT_PCT:
        problems.append(
            f"idle with {args.jobs:,} jobs the daemon used {rest['idle_cpu_pct']:.1f}% of a core "
            f"(over {IDLE_CPU_LIMIT_PCT}%: something looks at every job)"
        )
    if problems:
        raise SystemExit("the measurements failed their checks:\n" + "\n".join(problems))


def report(results: dict[str, Any], args: argparse.Namespace) -> None:
    if rest := results.get("at_rest"):
        print(f"### At rest: {args.agents:,} agents, {args.jobs:,} jobs\n")
        print(
            "| folder | start to /healthz (s) | then busy (s) | RSS at rest (MB) | peak RSS (MB) | open fds "
            "| idle CPU (% of a core) |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|")
        for label in ("without jobs", "with jobs"):
            c = rest[label]
            print(
                f"| {label} | {c['start_s']:.2f} | {max(0.0, c['settled_s'] - 3):.0f} | {c['rss_mb']:.0f} | {c['peak_rss_mb']:.0f} | {c['fds']} | {c['idle_cpu_pct']:.2f} |"
            )
        print(
            f"\n(the folder's first start, unmeasured, took {rest['first_start_s']:.0f} s to go quiet; "
            f"writing the jobs took {rest['insert_s']:.1f} s)\n"
        )
    if cells := results.get("lateness"):
        print(
            f"### Fire lateness: {args.rate:,.0f} fires a minute for {args.fire_minutes:g} min over {args.fire_agents} agents\n"
        )
        print(
            "| store | fires | fired / delivered | twice | fire late p50 / p99 / max (ms) | delivered late p50 / p99 (ms) | fires per daemon |"
        )
        print("|---|---:|---:|---:|---:|---:|---|")
        for label, c in cells.items():
            if c.get("failed"):
                print(f"| {label} | {c['fires']} | failed: {c['failed']} | | | | |")
                continue
            print(
                f"| {label} | {c['fires']} | {c['fired']} / {c['delivered']} | {c['fired_twice']} / {c['delivered_twice']} | "
                f"{c['fire_late_p50_ms']:.0f} / {c['fire_late_p99_ms']:.0f} / {c['fire_late_max_ms']:.0f} | "
                f"{c['deliver_late_p50_ms']:.0f} / {c['deliver_late_p99_ms']:.0f} | {', '.join(map(str, c['by_daemon'].values()))} |"
            )


if __name__ == "__main__":
    main()
