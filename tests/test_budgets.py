"""Budgets (agentd/engine/metering.py): a call is admitted while its counter is below the limit, and
settled with what it used; refused ones are said once; small_model; memory work is charged to whom it
serves; a day rolls over at midnight in the budget's time zone. On real SQLite files."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import httpx
import pytest

from agentd.config.budgets import BudgetSpec
from agentd.config.loader import parse_daemon
from agentd.daemon.daemon import Daemon
from agentd.engine.metering import BudgetExceeded, period_of, refusal_text, serve
from agentd.events import InboundEvent
from agentd.http.app import create_app
from agentd.messages import Message
from agentd.providers.base import Completion, CompletionRequest, Usage
from testkit.clock import ManualClock
from testkit.scripted import ScriptedProvider
from tests.support import agentd_cli

AGENT = "model: offline/offline\nmemory:\n  scope: thread\nchannels:\n  webhook: {}\n"
SMALL = "model:\n  name: offline/offline\n  small: offline/small\nmemory:\n  scope: thread\nchannels:\n  webhook: {}\n"


def _spent(data: Path) -> dict[tuple[str, str], int]:
    with sqlite3.connect(data / "_daemon.sqlite") as conn:
        return {
            (b.split("|")[0], s): u
            for b, s, u in conn.execute("SELECT budget, subject, used FROM budget_spend")
        }


def _usage(data: Path) -> list[tuple[str, ...]]:
    with sqlite3.connect(data / "_daemon.sqlite") as conn:
        return conn.execute(
            "SELECT agent, who, model, trigger, calls, estimated_calls, input_tokens + output_tokens, cost_micros"
            " FROM usage_days ORDER BY agent, who, model, trigger"
        ).fetchall()


async def _daemon(root: Path, settings: str, agents: dict[str, str], clock: ManualClock | None = None):
    (root / "agents").mkdir()
    for name, text in agents.items():
        (root / "agents" / f"{name}.yaml").write_text(text)
    (root / "agentd.yaml").write_text(settings)
    daemon = Daemon(root / "agents", root / "data", reload_interval=60)
    if clock is not None:
        daemon.clock = clock
    await daemon.start()
    client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(daemon)), base_url="http://agentd"
    )
    return daemon, client


async def _say(
    client: httpx.AsyncClient, text: str, user: str = "ana", conv: str = "c1", agent: str = "bot"
) -> dict:
    r = await client.post(
        f"/agents/{agent}/messages", json={"conversation_id": conv, "text": text, "user_id": user}
    )
    assert r.status_code == 200, r.text
    return r.json()


async def test_a_token_budget_refuses_exactly_once_the_counter_reaches_it_and_says_so_once(
    tmp_path: Path,
) -> None:
    settings = 'budgets:\n  - {per: person, limit: "60 tokens/day", timezone: Europe/Lisbon}\n'
    daemon, client = await _daemon(tmp_path, settings, {"bot": AGENT})
    try:
        answered = 0
        while True:
            before = _spent(tmp_path / "data").get(("person", "webhook:ana"), 0)
            body = await _say(client, f"message number {answered}")
            if body["error"] == "budget":
                break
            answered += 1
            assert answered < 20
        # refused exactly when the settled counter reached the limit, and not one call before
        assert before >= 60
        assert _spent(tmp_path / "data")[("person", "webhook:ana")] == before  # a refusal charges nothing
        used = sum(row[6] for row in _usage(tmp_path / "data") if row[1] == "webhook:ana")
        assert used == before  # the counter holds what the calls used (estimates here: the offline model)
        assert body["reply"] == "Today's limit of 60 tokens is reached; it resets at 00:00 Europe/Lisbon."
        again = await _say(client, "and now?")
        assert again["error"] == "budget" and again["reply"] == ""  # said once, not on every message
        other = await _say(client, "hello", user="bob", conv="c2")  # another person has their own budget
        assert other["error"] is None
        r = await client.get("/audit", params={"agent": "bot", "kind": "budget"})
        events = r.json()["events"]
        assert [e["action"] for e in events] == ["refused"]
        metrics = (await client.get("/metrics")).text
        assert 'agentd_budget_refusals_total{agent="bot",per="person"} 2.0' in metrics
        series = 'agentd_usage_tokens_total{agent="bot",direction="in",estimated="true",model="offline/offline",trigger="message"}'
        assert series in metrics
    finally:
        await client.aclose()
        await daemon.shutdown()


async def test_small_model_answers_past_a_money_limit_and_the_budget_still_counts(tmp_path: Path) -> None:
    settings = (
        "prices:\n  offline/offline: {input: 100000000, output: 100000000}\n  offline/small: {input: 1, output: 1}\n"
        'budgets:\n  - {per: agent, agent: bot, limit: "$50/month", on_exceed: small_model}\n'
    )
    daemon, client = await _daemon(tmp_path, settings, {"bot": SMALL})
    try:
        for n in range(3):
            assert (await _say(client, f"hi {n}"))["error"] is None
        rows = _usage(tmp_path / "data")
        models = {row[2] for row in rows}
        assert models == {"offline/offline", "offline/small"}
        first = [r for r in rows if r[2] == "offline/offline"]
        assert first[0][4] == 1  # one call on the main model passed the $50, then the small one answered
        spent = _spent(tmp_path / "data")[("agent", "bot")]
        assert spent == sum(row[7] for row in rows)  # the small model's spend counts toward the budget too
        assert all(row[5] == row[4] for row in rows)  # offline reports no usage: marked as estimates
    finally:
        await client.aclose()
        await daemon.shutdown()


async def test_compaction_is_charged_to_the_person_it_serves(tmp_path: Path) -> None:
    daemon, client = await _daemon(tmp_path, "", {"bot": AGENT})
    try:
        for n in range(5):
            await _say(client, f"message {n}. It has two sentences.")
        assert (await _say(client, "/compact"))["error"] is None
        triggers = {(row[1], row[3]) for row in _usage(tmp_path / "data")}
        assert ("webhook:ana", "compaction") in triggers and ("webhook:ana", "message") in triggers
    finally:
        await client.aclose()
        await daemon.shutdown()


async def test_the_day_rolls_over_at_midnight_in_the_budgets_time_zone(tmp_path: Path) -> None:
    zone = ZoneInfo("Europe/Lisbon")
    before_midnight = datetime(2026, 7, 1, 23, 59, 30, tzinfo=zone).timestamp()  # 22:59:30 UTC
    clock = ManualClock(before_midnight)
    settings = 'budgets:\n  - {per: person, limit: "1 tokens/day", timezone: Europe/Lisbon}\n'
    daemon, client = await _daemon(tmp_path, settings, {"bot": AGENT}, clock)
    try:
        assert (await _say(client, "first"))["error"] is None
        refused = await _say(client, "second")
        assert refused["error"] == "budget"
        clock.advance(29)  # 23:59:59 in Lisbon: still the same day
        assert (await _say(client, "third"))["error"] == "budget"
        clock.advance(2)  # 00:00:01 in Lisbon (23:00:01 UTC: the UTC day has not changed)
        assert (await _say(client, "fourth"))["error"] is None
    finally:
        await client.aclose()
        await daemon.shutdown()


def test_periods_and_refusals_are_said_in_the_budgets_zone() -> None:
    spec = BudgetSpec(per="person", limit="$2/day", timezone="Europe/Lisbon")
    now = datetime(2026, 12, 31, 23, 30, tzinfo=ZoneInfo("Europe/Lisbon")).timestamp()
    assert period_of(spec, now) == (
        "2026-12-31",
        datetime(2027, 1, 1, tzinfo=ZoneInfo("Europe/Lisbon")).timestamp(),
    )
    assert (
        refusal_text(spec, period_of(spec, now)[1])
        == "Today's limit of $2 is reached; it resets at 00:00 Europe/Lisbon."
    )
    month = BudgetSpec(per="agent", agent="helpdesk", limit="$300/month")
    assert period_of(month, now)[0] == "2026-12"
    assert refusal_text(month, period_of(month, now + 3600)[1]).startswith(
        "This agent's this month's limit of $300 is reached; it resets at 00:00 on 2027-02-01 UTC"
    )


@pytest.mark.parametrize("limit", ["$2/week", "2 tokens", "tokens/day", "$-1/day"])
def test_a_limit_that_does_not_parse_is_refused(limit: str) -> None:
    with pytest.raises(ValueError, match="limit"):
        BudgetSpec(per="person", limit=limit)


async def test_a_burst_over_a_rate_limit_is_told_once_dropped_and_audited_with_counts(tmp_path: Path) -> None:
    clock = ManualClock()
    settings = "rate_limits: [{per: person, limit: 3/minute}]\n"
    daemon, client = await _daemon(tmp_path, settings, {"bot": AGENT}, clock)
    try:
        burst = [await _say(client, f"quick {n}") for n in range(7)]
        assert [r["run_id"] is not None for r in burst] == [True] * 3 + [False] * 4
        assert burst[3]["reply"].startswith(
            "You are sending messages faster than I can take them (at most 3/minute)"
        )
        assert [r["reply"] for r in burst[4:]] == ["", "", ""]  # told once, not once per message
        clock.advance(20)  # one token back
        assert (await _say(client, "calmer now"))["run_id"] is not None
        events = (await client.get("/audit", params={"agent": "bot", "kind": "rate_limit"})).json()["events"]
        assert [(e["action"], e["data"].get("refused")) for e in events] == [
            ("limited", None),
            ("streak_ended", 4),
        ]
        # the dropped messages were not queued: only the answered ones are in the transcript
        r = await client.get("/agents/bot/conversations/webhook:c1")
        texts = [m["parts"][0]["text"] for m in r.json()["messages"] if m["role"] == "user"]
        assert texts == ["quick 0", "quick 1", "quick 2", "calmer now"]
    finally:
        await client.aclose()
        await daemon.shutdown()


async def test_usage_is_read_back_by_the_person_and_the_operator_with_estimates_marked(
    tmp_path: Path,
) -> None:
    settings = (
        "prices:\n  offline/offline: {input: 1000, output: 1000}\n"
        'budgets:\n  - {per: person, limit: "$1/day"}\n'
    )
    daemon, client = await _daemon(tmp_path, settings, {"bot": AGENT, "other": AGENT})
    try:
        for n in range(3):
            await _say(client, f"hello {n}")
        await _say(client, "hi", user="bob", conv="c2", agent="other")
        own = (await _say(client, "/usage"))["reply"]
        [day, month, limit] = own.splitlines()
        assert day.startswith("Your usage today: ") and day.endswith("(estimated).")
        assert month.startswith("This month: ")
        assert limit.startswith("Your limit today: $0.") and limit.endswith(" of $1 (UTC).")

        r = await client.get("/usage")
        assert r.status_code == 200
        body = r.json()
        rows = _usage(tmp_path / "data")
        assert body["total"]["calls"] == sum(row[4] for row in rows) == 4
        assert body["total"]["estimated"] is True and body["total"]["estimated_calls"] == 4
        assert body["total"]["cost"] == pytest.approx(sum(row[7] for row in rows) / 1e6)
        assert [g["day"] for g in body["groups"]] == [
            datetime.now().astimezone(ZoneInfo("UTC")).date().isoformat()
        ]
        assert [p["person"] for p in body["top_people"]] == ["webhook:ana", "webhook:bob"]
        assert {a["agent"] for a in body["top_agents"]} == {"bot", "other"}

        by_agent = (await client.get("/usage", params={"group_by": "agent", "person": "webhook:bob"})).json()
        assert [(g["agent"], g["calls"]) for g in by_agent["groups"]] == [("other", 1)]
        near = (await client.get("/usage")).json()["near_limit"]
        assert near == [] or all(n["ratio"] >= 0.8 for n in near)

        for params, reason in (
            ({"group_by": "week"}, "group_by: expected one of day, agent, person"),
            ({"since": "yesterday"}, "since: expected an ISO-8601 date-time"),
            ({"until": "2026-13-01"}, "until:"),
        ):
            r = await client.get("/usage", params=params)
            assert r.status_code == 400 and reason in r.json()["error"], (params, r.text)
        empty = (await client.get("/usage", params={"since": "2026-12-10", "until": "2026-12-01"})).json()
        assert empty["groups"] == [] and empty["total"]["calls"] == 0  # an empty span holds nothing
    finally:
        await client.aclose()
        await daemon.shutdown()


async def test_near_limit_names_who_is_near_a_budget(tmp_path: Path) -> None:
    settings = 'budgets:\n  - {per: person, limit: "30 tokens/day"}\n  - {per: agent, agent: bot, limit: "10M tokens/month"}\n'
    daemon, client = await _daemon(tmp_path, settings, {"bot": AGENT})
    try:
        while (await _say(client, "a message that has some words in it"))["error"] is None:
            pass
        near = (await client.get("/usage")).json()["near_limit"]
        assert [(n["per"], n["subject"], n["limit"]) for n in near] == [
            ("person", "webhook:ana", "30 tokens")
        ]
        assert near[0]["used"] >= 30 and near[0]["ratio"] >= 1
    finally:
        await client.aclose()
        await daemon.shutdown()


async def test_agentd_usage_prints_what_get_usage_answers(tmp_path: Path) -> None:
    daemon, client = await _daemon(
        tmp_path, "prices: {offline/offline: {input: 1000, output: 1000}}\n", {"bot": AGENT}
    )
    try:
        for n in range(2):
            await _say(client, f"hello {n}")
        served = (await client.get("/usage", params={"group_by": "person"})).json()
    finally:
        await client.aclose()
        await daemon.shutdown()
    done = agentd_cli(tmp_path, "usage", "--group-by", "person", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["groups"] == served["groups"]
    text = agentd_cli(tmp_path, "usage", "--group-by", "person").stdout
    assert "webhook:ana" in text and "~" in text  # the offline model's counts are estimates, marked
    refused = agentd_cli(tmp_path, "usage", "--since", "2026-12-10", "--until", "2026-12-01")
    assert refused.returncode != 0 and "is after --until" in refused.stderr


async def test_embeddings_of_episodic_memory_are_charged_to_the_person_as_estimates(tmp_path: Path) -> None:
    episodic = "memory:\n  strategy: {kind: episodic}\nchannels:\n  webhook: {}\n"
    settings = 'embedder: hash/256\nbudgets:\n  - {per: person, limit: "1M tokens/day"}\n'
    daemon, client = await _daemon(tmp_path, settings, {"bot": episodic})
    try:
        await _say(client, "we fly to Lisbon on Friday")
        await _say(client, "where do we fly?")
    finally:
        await client.aclose()
        await daemon.shutdown()
    embedding = [row for row in _usage(tmp_path / "data") if row[3] == "embedding"]
    assert embedding and all(row[:3] == ("bot", "webhook:ana", "hash/256") for row in embedding)
    assert all(row[5] == row[4] for row in embedding)  # every one an estimate
    spent = _spent(tmp_path / "data")[("person", "webhook:ana")]
    assert spent == sum(row[6] for row in _usage(tmp_path / "data"))  # chat and embeddings, one counter


async def test_compact_past_the_limit_says_so_rather_than_failing(tmp_path: Path) -> None:
    daemon, client = await _daemon(
        tmp_path, 'budgets:\n  - {per: person, limit: "100 tokens/day"}\n', {"bot": AGENT}
    )
    try:
        while (await _say(client, "a message. It has two sentences."))["error"] is None:
            pass
        reply = await _say(client, "/compact")
        assert reply["reply"] == "Today's limit of 100 tokens is reached; it resets at 00:00 UTC."
    finally:
        await client.aclose()
        await daemon.shutdown()


async def test_a_sub_agents_calls_are_charged_to_the_person_the_caller_serves(tmp_path: Path) -> None:
    lead, helper = ScriptedProvider("lead"), ScriptedProvider("helper")
    lead.call("ask_researcher", task="find the capital of Peru").reply("It is Lima.")
    helper.reply("Lima")
    (tmp_path / "agents").mkdir()
    caller = "model: lead/m\nsubagents: [{agent: researcher}]\nchannels:\n  webhook: {}\n"
    (tmp_path / "agents" / "coordinator.yaml").write_text(caller)
    (tmp_path / "agents" / "researcher.yaml").write_text("model: helper/m\n")
    (tmp_path / "agentd.yaml").write_text('budgets:\n  - {per: person, limit: "1M tokens/day"}\n')
    daemon = Daemon(
        tmp_path / "agents", tmp_path / "data", reload_interval=60, providers={"lead": lead, "helper": helper}
    )
    await daemon.start()
    client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(daemon)), base_url="http://agentd"
    )
    try:
        assert (await _say(client, "what is the capital of Peru?", agent="coordinator"))[
            "reply"
        ] == "It is Lima."
    finally:
        await client.aclose()
        await daemon.shutdown()
    rows = {(r[0], r[1], r[2]): (r[4], r[6]) for r in _usage(tmp_path / "data")}
    # the lead's two calls (the tool call, the answer) and the sub-agent's one, all of Ana's, as reported
    assert rows == {
        ("coordinator", "webhook:ana", "lead/m"): (2, 30),
        ("researcher", "webhook:ana", "helper/m"): (1, 15),
    }
    assert _spent(tmp_path / "data")[("person", "webhook:ana")] == 45


async def test_a_scheduled_jobs_calls_count_on_its_job_budget_under_its_trigger(tmp_path: Path) -> None:
    settings = 'budgets:\n  - {per: job, job: digest, limit: "10 tokens/day"}\n'
    daemon, client = await _daemon(tmp_path, settings, {"bot": AGENT})
    try:
        meter = daemon.resources.meter
        assert meter is not None
        # what the scheduler's event says of itself (agentd.engine.metering.serve reads it)
        serve(
            InboundEvent(
                "bot",
                "schedule:digest",
                "the digest",
                "schedule",
                metadata={"trigger": "schedule", "job": "digest"},
            )
        )
        request = CompletionRequest(
            model="offline/offline", system="", messages=[Message.user("go")], max_output_tokens=5
        )

        async def run(chain: Sequence[str]) -> tuple[Completion, str]:
            return Completion(Message.assistant("done"), Usage(8, 4), "stop"), chain[0]

        await meter.call("bot", (("offline/offline",), None), request, run)
        with pytest.raises(BudgetExceeded) as refused:
            await meter.call("bot", (("offline/offline",), None), request, run)
        assert (
            refused.value.reply == "This job's today's limit of 10 tokens is reached; it resets at 00:00 UTC."
        )
        assert _spent(tmp_path / "data") == {("job", "digest"): 12}
        assert [(r[0], r[1], r[3], r[4]) for r in _usage(tmp_path / "data")] == [("bot", "", "schedule", 1)]
        # a message of a person is no job's: the job's budget does not apply to it
        assert (await _say(client, "hello"))["error"] is None
    finally:
        await client.aclose()
        await daemon.shutdown()


def test_the_readme_budgets_example_is_a_valid_agentd_yaml(tmp_path: Path) -> None:
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    section = readme[readme.index("## Budgets and rate limits") :]
    block = section[section.index("```yaml\n") + 8 : section.index("```\n", section.index("```yaml\n") + 8)]
    (tmp_path / "agentd.yaml").write_text(block)
    spec = parse_daemon(tmp_path / "agentd.yaml", env={})
    assert [b.amount() for b in spec.budgets] == [
        ("money", 2_000_000, "day"),
        ("money", 300_000_000, "month"),
        ("tokens", 2_000_000, "day"),
    ]
    assert [r.rate() for r in spec.rate_limits] == [(20, 60.0), (100, 60.0)]


async def test_a_refusal_said_is_not_said_again_after_a_restart(tmp_path: Path) -> None:
    settings = 'budgets:\n  - {per: person, limit: "1 tokens/day"}\n'
    daemon, client = await _daemon(tmp_path, settings, {"bot": AGENT})
    try:
        await _say(client, "first")
        assert (await _say(client, "second"))["reply"].startswith("Today's limit of 1 tokens is reached")
    finally:
        await client.aclose()
        await daemon.shutdown()
    again = Daemon(tmp_path / "agents", tmp_path / "data", reload_interval=60)
    await again.start()
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(again)), base_url="http://agentd")
    try:
        body = await _say(client, "third")
        assert body["error"] == "budget" and body["reply"] == ""
    finally:
        await client.aclose()
        await again.shutdown()


async def test_erasing_a_person_leaves_no_byte_of_their_budget_usage_or_rate_limit(tmp_path: Path) -> None:
    who = "zq-ana-7"
    settings = (
        'budgets:\n  - {per: person, limit: "40 tokens/day"}\nrate_limits: [{per: person, limit: 4/minute}]\n'
    )
    daemon, client = await _daemon(tmp_path, settings, {"bot": AGENT}, ManualClock())
    try:
        await _say(client, "hello all", user="bob")  # a shared conversation: its events stay, less her fields
        replies = [await _say(client, f"message {n}", user=who) for n in range(6)]
        assert {r["error"] for r in replies} >= {"budget"} and any(r["run_id"] is None for r in replies)
        kinds = {e["kind"] for e in (await client.get("/audit", params={"agent": "bot"})).json()["events"]}
        assert {"budget", "rate_limit"} <= kinds
        assert (await client.get(f"/people/{who}/export")).json()["usage"]
        r = await client.delete(f"/people/{who}")
        assert r.status_code == 200, r.text
        assert r.json()["erased"]["_daemon"]["usage_rows"] >= 1
    finally:
        await client.aclose()
        await daemon.shutdown()
    holding = [
        p.name for p in (tmp_path / "data").iterdir() if p.is_file() and who.encode() in p.read_bytes()
    ]
    assert holding == []


async def test_a_channels_rate_limit_counts_everyone_in_it_and_only_it(tmp_path: Path) -> None:
    settings = "rate_limits: [{per: channel, channel: webhook, limit: 2/minute}, {per: channel, channel: slack, limit: 1/hour}]\n"
    daemon, client = await _daemon(tmp_path, settings, {"bot": AGENT}, ManualClock())
    try:
        assert (await _say(client, "one", user="ana"))["run_id"] is not None
        assert (await _say(client, "two", user="bob", conv="c2"))["run_id"] is not None
        third = await _say(client, "three", user="eve", conv="c3")
        assert third["run_id"] is None and "(at most 2/minute in this channel)" in third["reply"]
        events = (await client.get("/audit", params={"agent": "bot", "kind": "rate_limit"})).json()["events"]
        assert [(e["action"], e["data"]) for e in events] == [
            ("limited", {"per": "channel", "limit": "2/minute", "subject": "webhook"})
        ]
    finally:
        await client.aclose()
        await daemon.shutdown()
