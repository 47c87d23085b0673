"""Three `agentd run` processes on one PostgreSQL database under load, one of them killed with -9 (issue 12).

Each daemon is a real subprocess in a folder of its own (the same agent files, the same `store.url`),
as on three hosts. 16 clients drive 50 conversations, each client sending its conversations' messages
to random daemons and awaiting every reply. A third of the way in, the daemon holding the Telegram bot's
lease is killed with -9 while it is inside a model call. `store.lease_s` is 2 s here (15 s by default),
so the takeovers happen within the test.

What is checked, against the database and each daemon's API: every acknowledged turn stored exactly
once, in send order, with the reply the client got and no half turn; each turn saw every earlier turn,
whichever daemon took it (the offline model says how many messages it was sent); compaction ran once
per due point; the transcript each surviving daemon shows is the same; the killed daemon's conversation
continues after its lease and not before; the others kept answering meanwhile; the Telegram bot moved
to another daemon and answered no update twice; /healthz, GET /agents, runs and audit events name daemons.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from testkit.fake_llm import FakeLLM
from testkit.fake_telegram import FakeTelegram
from testkit.waiting import wait_until
from tests.daemon_process import DaemonProcess

pytestmark = pytest.mark.slow

LEASE_S = 2.0  # store.lease_s for this test only: the default (15 s) would make it wait 15 s per takeover
DAEMONS, CLIENTS, CONVERSATIONS, TURNS = 3, 16, 50, 12
TAKEOVER_SLACK_S = 8.0  # beyond the lease: a loaded 2-core CI machine runs 3 daemons, postgres and this
FILLER = "with a few words of padding so that the conversation grows toward its compaction threshold"

BOT = """\
purpose: Answer briefly.
memory: {{scope: thread, compact_at_tokens: 300}}
channels:
  webhook: {{}}
  telegram: {{token: "{token}", api_base_url: "{telegram}", poll_timeout: 2}}
"""
# the model of `slow` is the fake model server: it can hold a call open while its daemon is killed
SLOW = "model: fake/m\nmemory: {scope: thread}\nchannels: {webhook: {}}\n"
SETTINGS = """\
store: {{url: "{url}", lease_s: {lease}}}
providers: {{fake: {{kind: openai, base_url: "{llm}", api_key: k, max_retries: 0}}}}
"""


@dataclass
class Sent:
    """One message a client sent: where, and what came back (nothing, when its daemon died under it)."""

    conversation: str
    text: str
    daemon: str = ""
    status: int | None = None
    reply: str | None = None
    answered_at: float | None = None

    @property
    def acked(self) -> bool:
        return self.status == 200


class Load:
    """16 clients over 50 conversations: each message to a random live daemon, each reply awaited."""

    def __init__(self, client: httpx.AsyncClient, daemons: list[DaemonProcess]):
        self.client = client
        self.alive = list(daemons)  # the test removes a daemon here before it kills it
        self.sent: dict[str, list[Sent]] = defaultdict(list)
        self.rng = random.Random(12)
        self.refused = 0

    def acked(self) -> list[Sent]:
        return [s for sent in self.sent.values() for s in sent if s.acked]

    async def run(self) -> None:
        keys = [f"webhook:c{n}" for n in range(CONVERSATIONS)]
        await asyncio.gather(*(self._client(keys[n::CLIENTS]) for n in range(CLIENTS)))

    async def _client(self, keys: list[str]) -> None:
        for turn in range(TURNS):
            for key in keys:
                await self._send(Sent(key, f"{key} message {turn} {FILLER}"))

    async def _send(self, sent: Sent) -> None:
        self.sent[sent.conversation].append(sent)
        while True:
            daemon = self.rng.choice(self.alive)
            sent.daemon = daemon.url
            try:
                r = await post(
                    self.client, daemon, "bot", sent.conversation.removeprefix("webhook:"), sent.text
                )
            except httpx.ConnectError:
                continue  # it never reached that daemon (killed a moment ago): another one takes it
            except httpx.HTTPError:
                return  # its daemon died with it in flight: maybe stored, never acknowledged
            sent.status, sent.answered_at = r.status_code, time.monotonic()
            if r.status_code == 503:
                # "send it again": refused, nothing kept (a daemon that stalled past its lease on a
                # loaded machine is told so by its fence); a refused message stored anyway would
                # show up twice below
                self.refused += 1
                sent.status = None
                continue
            if r.status_code == 200:
                sent.reply = r.json()["reply"]
            return


async def post(
    client: httpx.AsyncClient, daemon: DaemonProcess, agent: str, conversation: str, text: str
) -> httpx.Response:
    body = {"conversation_id": conversation, "text": text}
    return await client.post(f"{daemon.url}/agents/{agent}/messages", json=body)


async def get(client: httpx.AsyncClient, daemon: DaemonProcess, path: str, **params: str) -> Any:
    r = await client.get(f"{daemon.url}{path}", params=params)
    assert r.status_code == 200, r.text
    return r.json()


async def telegram_channel(client: httpx.AsyncClient, daemon: DaemonProcess) -> dict[str, Any]:
    """The bot's Telegram channel as GET /agents on `daemon` shows it (status, held_by)."""
    agents = (await get(client, daemon, "/agents"))["agents"]
    [bot] = [a for a in agents if a["name"] == "bot"]
    [channel] = [c for c in bot["channels"] if c["name"] == "telegram"]
    return dict(channel)


async def telegram_holder(client: httpx.AsyncClient, daemons: list[DaemonProcess]) -> DaemonProcess | None:
    """The daemon running the bot's Telegram polling, once every daemon agrees who holds its lease."""
    names = {d.url: (await get(client, d, "/healthz"))["daemon"] for d in daemons}
    channels = {d.url: await telegram_channel(client, d) for d in daemons}
    running = [d for d in daemons if channels[d.url]["status"] == "running"]
    if len(running) != 1:
        return None
    holder = names[running[0].url]
    others = [channels[d.url] for d in daemons if d is not running[0]]
    if any(c["status"] != "standby" for c in others):
        return None
    return running[0] if all(c["held_by"] == holder for c in channels.values()) else None


async def until_holder(
    client: httpx.AsyncClient, daemons: list[DaemonProcess], timeout: float
) -> DaemonProcess:
    deadline = time.monotonic() + timeout
    while (holder := await telegram_holder(client, daemons)) is None:
        assert time.monotonic() < deadline, "no daemon took the Telegram bot's lease"
        await asyncio.sleep(0.1)
    return holder


async def say_on_telegram(telegram: FakeTelegram, user: int, text: str) -> dict[str, Any]:
    """A person's message to the bot, once its answer came back."""
    answered = len(telegram.sent)
    update = telegram.send_text(text, user_id=user)
    await telegram.wait_for_sent(answered + 1, timeout=30)
    return update


# -- the database, read directly ---------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    seq: int
    role: str
    text: str
    compacted: bool
    run_id: str | None


def stored(url: str, agent: str) -> dict[str, list[Row]]:
    """Every message of the agent's active threads, compacted ones too, by conversation, in seq order."""
    with psycopg.connect(url) as db:
        rows = db.execute(
            "SELECT t.conversation_key, m.seq, m.role, m.body, m.compacted, m.run_id"
            " FROM agentd.messages m JOIN agentd.threads t ON t.id = m.thread_id"
            " JOIN agentd.agents a ON a.id = t.agent_id"
            " WHERE a.name = %s AND t.status = 'active' ORDER BY t.conversation_key, m.seq",
            (agent,),
        ).fetchall()
    out: dict[str, list[Row]] = defaultdict(list)
    for key, seq, role, body, compacted, run_id in rows:
        out[key].append(Row(seq, role, json.loads(body)["parts"][0]["text"], compacted, run_id))
    return out


def runs_in_order(url: str, agent: str) -> dict[str, list[dict[str, Any]]]:
    """Each conversation's runs in the order they were written, with the compactions' upto_seq."""
    with psycopg.connect(url) as db:
        rows = db.execute(
            "SELECT r.conversation_key, r.id, r.trigger, r.daemon, au.data, au.daemon FROM agentd.runs r"
            " JOIN agentd.agents a ON a.id = r.agent_id"
            " LEFT JOIN agentd.audit au ON au.agent_id = r.agent_id AND au.run_id = r.id"
            " AND au.kind = 'compaction' WHERE a.name = %s ORDER BY r.n",
            (agent,),
        ).fetchall()
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for key, run_id, trigger, daemon, audit, audit_daemon in rows:
        compaction = json.loads(audit) if audit else None
        out[key].append(
            {
                "id": run_id,
                "trigger": trigger,
                "daemon": daemon,
                "compaction": compaction,
                "audit_daemon": audit_daemon,
            }
        )
    return out


# -- the test ------------------------------------------------------------------------------------------


@pytest.fixture
def fake_llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


@pytest.fixture
async def telegram() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as fake:
        yield fake


@pytest.fixture
async def daemons(
    tmp_path: Path, postgres_url: str, fake_llm: FakeLLM, telegram: FakeTelegram
) -> AsyncIterator[list[DaemonProcess]]:
    started = []
    for n in range(DAEMONS):
        root = tmp_path / f"host{n}"
        (root / "agents").mkdir(parents=True)
        (root / "agents" / "bot.yaml").write_text(
            BOT.format(token=telegram.token, telegram=telegram.api_base_url)
        )
        (root / "agents" / "slow.yaml").write_text(SLOW)
        (root / "agentd.yaml").write_text(
            SETTINGS.format(url=postgres_url, lease=LEASE_S, llm=fake_llm.openai_base_url)
        )
        started.append(DaemonProcess(root))
    try:
        await asyncio.gather(*(d.start() for d in started))
        yield started
    finally:
        for d in started:
            d.kill()


async def test_three_daemons_one_database_kill_9_under_load(
    daemons: list[DaemonProcess], postgres_url: str, fake_llm: FakeLLM, telegram: FakeTelegram
) -> None:
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(timeout=60, limits=limits, trust_env=False) as client:
        names = {d.url: (await get(client, d, "/healthz"))["daemon"] for d in daemons}
        assert len(set(names.values())) == DAEMONS  # /healthz names the daemon that answered

        # one daemon polls Telegram, the others stand by; GET /agents on each says which
        victim = await until_holder(client, daemons, timeout=30)
        survivors = [d for d in daemons if d is not victim]
        people = (11, 12, 13)
        before = [await say_on_telegram(telegram, user, f"tg {user} before") for user in people]

        # a conversation of `slow`, answered once; its next message will be inside the victim's model call
        first = await post(client, survivors[0], "slow", "held", "a first question")
        assert first.status_code == 200, first.text

        load = Load(client, daemons)
        loading = asyncio.ensure_future(load.run())
        await wait_until(lambda: len(load.acked()) >= CONVERSATIONS * TURNS // 3, "a third of the load", 90)

        calls = len(fake_llm.requests)
        fake_llm.hang(60)
        held = asyncio.ensure_future(post(client, victim, "slow", "held", "a question never answered"))
        await wait_until(lambda: len(fake_llm.requests) > calls, "the victim inside its model call", 20)
        load.alive.remove(victim)
        assert victim.proc is not None
        victim.proc.kill()  # -9: holding `held`, the Telegram lease, and whatever turns were in flight
        killed_at = time.monotonic()

        # the conversation it held goes on elsewhere once its lease has run out, and not before
        resumed = await post(client, survivors[1], "slow", "held", "a question after the crash")
        waited = time.monotonic() - killed_at
        assert resumed.status_code == 200, resumed.text
        assert LEASE_S / 2 <= waited <= LEASE_S + TAKEOVER_SLACK_S, waited
        with pytest.raises(httpx.HTTPError):
            await held
        victim.proc.wait()

        # the Telegram bot moves to a survivor, which answers no update twice: not the updates the
        # victim never confirmed (fetched again), nor the same messages sent again under new update ids
        holder = await until_holder(client, survivors, timeout=LEASE_S + TAKEOVER_SLACK_S + 10)
        for update in before:
            telegram.redeliver(update)
        for user in people:
            await say_on_telegram(telegram, user, f"tg {user} after")

        await loading
        # the others kept answering while the victim's leases were still running
        window = (killed_at, killed_at + LEASE_S / 2)
        answered_meanwhile = [
            s for s in load.acked() if s.answered_at and window[0] < s.answered_at < window[1]
        ]
        assert answered_meanwhile
        assert all(s.status in (None, 200) for sent in load.sent.values() for s in sent)
        # and the conversations whose turns were in flight on the victim went on
        cut_off = [key for key, sent in load.sent.items() if any(s.status is None for s in sent)]
        assert all(load.sent[key][-1].acked for key in cut_off)

        transcripts = stored(postgres_url, "bot")
        runs = runs_in_order(postgres_url, "bot")
        for key, sent in load.sent.items():
            check_conversation(key, sent, transcripts[key], runs[key])
            # the transcript as every surviving daemon shows it (its cached copy checked first) is the same
            shown = [await get(client, d, f"/agents/bot/conversations/{key}") for d in survivors]
            assert shown[0] == shown[1], key
            visible = [r.text for r in transcripts[key] if not r.compacted]
            assert [m["parts"][0]["text"] for m in shown[0]["messages"]] == visible, key

        # every run and audit event records its daemon: all three took turns, the victim until it died
        served = {r["daemon"] for key in load.sent for r in runs[key]}
        assert served == set(names.values())
        compacted_by = {
            r["audit_daemon"] for key in load.sent for r in runs[key] if r["trigger"] == "compaction"
        }
        events = (await get(client, survivors[0], "/audit", agent="bot", kind="compaction", limit="1000"))[
            "events"
        ]
        assert {e["daemon"] for e in events} == compacted_by <= set(names.values())

        # Telegram: each message answered once, before the kill by the victim, after it by the new holder
        for user in people:
            for when in ("before", "after"):
                said = f"You said: tg {user} {when}"
                assert sum(said in m["text"] for m in telegram.sent) == 1, said
            polled = [r["daemon"] for r in runs[f"telegram:{user}"] if r["trigger"] == "message"]
            assert polled == [names[victim.url], names[holder.url]]

        # the slow conversation: the killed turn left nothing, the turns around it are there
        held_texts = [r.text for r in stored(postgres_url, "slow")["webhook:held"] if r.role == "user"]
        assert held_texts == ["a first question", "a question after the crash"]

        # stopped with SIGTERM (it drains and exits 0), the holder gives the lease back; the last daemon
        # takes the bot over and answers it
        [standby] = [d for d in survivors if d is not holder]
        assert holder.stop() == 0
        await until_holder(client, [standby], timeout=LEASE_S + TAKEOVER_SLACK_S)
        await say_on_telegram(telegram, 11, "tg 11 last")
        assert standby.stop() == 0


def check_conversation(key: str, sent: list[Sent], rows: list[Row], runs: list[dict[str, Any]]) -> None:
    """One conversation of the load, as stored: see the module docstring."""
    acked = {s.text: s.reply for s in sent if s.acked}
    order = [s.text for s in sent]
    users = [r for r in rows if r.role == "user"]
    # every acknowledged turn once, nothing twice, in the order sent (an unacknowledged one at most once)
    texts = [r.text for r in users]
    assert len(set(texts)) == len(texts), f"{key}: a message stored twice"
    assert set(acked) <= set(texts), f"{key}: acknowledged turns missing: {set(acked) - set(texts)}"
    assert texts == [t for t in order if t in set(texts)], f"{key}: stored out of send order"
    # no half turn: each person's message is followed by its reply, the one the client got
    assert [r.role for r in rows] == ["user", "assistant"] * len(users), f"{key}: a half turn"
    assert [r.seq for r in rows] == list(range(1, len(rows) + 1))
    replies = {rows[i].text: rows[i + 1].text for i in range(0, len(rows), 2)}
    assert all(replies[text] == reply for text, reply in acked.items()), f"{key}: another reply stored"

    # compaction: once per due point; each took in exactly the messages after the one before it
    compactions = [r for r in runs if r["trigger"] == "compaction"]
    assert compactions and all(r["compaction"] for r in compactions), (
        f"{key}: no compaction, or one unaudited"
    )
    upto = 0
    for run in compactions:
        took = run["compaction"]
        assert took["messages"] == took["upto_seq"] - upto, (
            f"{key}: a compaction took in compacted messages again"
        )
        assert run["daemon"] == run["audit_daemon"] is not None  # its run and audit event, in one commit
        upto = took["upto_seq"]
    assert sum(r.compacted for r in rows) == upto

    # each turn saw every earlier turn, whichever daemon took it: the offline model says how many
    # messages it was sent (all since the last compaction before it)
    upto, seq_of = 0, {r.run_id: r.seq for r in users}
    for run in runs:
        if run["trigger"] == "compaction":
            upto = run["compaction"]["upto_seq"]
        elif run["id"] in seq_of:
            seq = seq_of[run["id"]]
            seen = re.match(r"\(offline model\) I see (\d+) earlier", replies[rows[seq - 1].text])
            assert seen is not None and int(seen[1]) == seq - 1 - upto, f"{key}: turn {seq} missed a turn"
