"""Secrets kept out of memory: `memory.secrets` (redact | refuse | allow) at every kind of memory write,
`transcripts.redact_secrets`, and an audit trail that names the detector, never the value."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentd.config.loader import parse_agent
from agentd.engine.agent import Agent
from agentd.errors import ConfigError
from agentd.providers.embedders import HashEmbedder
from agentd.store.queries import ActiveThread
from testkit.scripted import ScriptedProvider
from tests.support import Harness, every_episode, every_fact, say, sqlite_file

pytestmark = pytest.mark.both_stores  # each test runs on SQLite files and on PostgreSQL

OPENAI_KEY = "sk-proj-Ab3dEfGh1JkLmNoPqRsTuVwXyZ0123456789abcd"
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
CARD = "4242 4242 4242 4242"
GITHUB = "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"
SLACK = "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5"
    "MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
SECRETS = (OPENAI_KEY, AWS_KEY, CARD, GITHUB, SLACK, JWT)


class RecordingEmbedder(HashEmbedder):
    """The hash embedder, keeping every text it was asked to embed (what an embedding API would get)."""

    def __init__(self) -> None:
        super().__init__(256)
        self.texts: list[str] = []

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.texts += texts
        return await super().embed(texts)


async def secret_audit(agent: Agent) -> list[tuple[str, dict[str, Any]]]:
    events = await agent.audit_events(limit=1000)
    return [(e["action"], e["data"]) for e in events if e["action"].startswith("secret_")]


async def tables_holding(harness: Harness, agent: Agent, secret: str, skip: Sequence[str] = ()) -> list[str]:
    """Every table of the agent's data with a row that holds `secret` (episode keyword indexes too), read
    raw: what is kept, wherever it is kept, which no query shows whole. The agent's SQLite file, or the
    agentd schema of the test's own PostgreSQL database (this agent's rows are the only ones there)."""
    if harness.store_url is None:
        with sqlite_file(harness.file_of(agent)) as c:
            names = [r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            return [n for n in names if n not in skip and _holds(c.execute(f'SELECT * FROM "{n}"'), secret)]
    with psycopg.connect(harness.store_url) as conn:
        names = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'agentd'")]
        return [
            n
            for n in names
            if n not in skip and _holds(conn.execute(f'SELECT * FROM agentd."{n}"'), secret)  # type: ignore[arg-type]
        ]


def _holds(rows: Iterable[Any], secret: str) -> bool:
    return any(secret in str(row) for row in rows)


async def assert_nowhere(harness: Harness, agent: Agent, *secrets: str, skip: Sequence[str] = ()) -> None:
    for secret in secrets:
        assert await tables_holding(harness, agent, secret, skip) == [], secret


def redacted(detector: str, write: str, policy: str = "redact", count: int = 1) -> tuple[str, dict[str, Any]]:
    return "secret_redacted", {"detector": detector, "write": write, "count": count, "policy": policy}


def last_tool_result(model: ScriptedProvider) -> tuple[str, bool]:
    [result] = model.requests[-1].messages[-1].tool_results
    return result.content, result.is_error


def persistent(policy: str | None = None) -> str:
    secrets = f", secrets: {policy}" if policy else ""
    return f"model: main/m\nmemory: {{scope: thread, persistent: true{secrets}}}\n"


# -- remember ---------------------------------------------------------------------------------


async def test_remember_redacts_a_secret_by_default_and_audits_the_detector(harness: Harness) -> None:
    main = ScriptedProvider("main")
    agent = await harness.agent(persistent(), providers={"main": main})
    main.call("remember", key="openai", value=f"Ana's key is {OPENAI_KEY}").reply("kept")
    await say(agent)("keep my key please")
    content, is_error = last_tool_result(main)
    assert not is_error
    assert (
        content
        == "Remembered openai. What looked like a secret (openai_key) was stored as a marker, not as written."
    )
    assert await agent.memory_value("webhook:c1", "openai", None) == "Ana's key is [REDACTED:openai_key]"
    assert await secret_audit(agent) == [redacted("openai_key", "memory")]
    # the value is in no memory, no audit event: only the transcript of the turn it was said in
    assert await tables_holding(harness, agent, OPENAI_KEY) == ["messages"]


async def test_refuse_gives_the_model_a_tool_error_and_stores_nothing(harness: Harness) -> None:
    main = ScriptedProvider("main")
    agent = await harness.agent(persistent("refuse"), providers={"main": main})
    main.call("remember", key="card", value=f"visa {CARD}").reply("could not")
    await say(agent)("remember my card")
    content, is_error = last_tool_result(main)
    assert is_error and content.startswith("remember refused:") and "(card_number)" in content
    assert "Nothing was stored" in content and CARD not in content
    assert agent.memory_keys("webhook:c1", None) == []
    assert await agent.memory_value("webhook:c1", "card", None) is None
    assert await secret_audit(agent) == [
        ("secret_refused", {"detector": "card_number", "write": "memory", "count": 1, "policy": "refuse"})
    ]
    remembered = [e for e in await agent.audit_events(limit=1000) if e["action"] == "remember"]
    assert remembered == []
    # without a secret, refuse changes nothing
    main.call("remember", key="city", value="Lisbon").reply("kept")
    await say(agent)("I live in Lisbon")
    assert last_tool_result(main) == ("Remembered city.", False)


async def test_allow_keeps_the_value_as_written(harness: Harness) -> None:
    main = ScriptedProvider("main")
    agent = await harness.agent(persistent("allow"), providers={"main": main})
    main.call("remember", key="aws", value=AWS_KEY).reply("kept")
    await say(agent)("keep it")
    assert last_tool_result(main) == ("Remembered aws.", False)
    assert await agent.memory_value("webhook:c1", "aws", None) == AWS_KEY
    assert await secret_audit(agent) == []


async def test_a_key_that_is_a_secret_is_refused_even_when_values_are_redacted(harness: Harness) -> None:
    main = ScriptedProvider("main")
    agent = await harness.agent(persistent(), providers={"main": main})
    main.call("remember", key=AWS_KEY, value="the deploy key").reply("no")
    await say(agent)("remember it")
    content, is_error = last_tool_result(main)
    assert is_error and "(aws_access_key)" in content
    assert agent.memory_keys("webhook:c1", None) == []
    assert await secret_audit(agent) == [
        (
            "secret_refused",
            {"detector": "aws_access_key", "write": "memory_key", "count": 1, "policy": "redact"},
        )
    ]


# -- episodes ---------------------------------------------------------------------------------


def episodic(write: str, policy: str | None = None) -> str:
    secrets = f", secrets: {policy}" if policy else ""
    return f"model: main/m\nmemory: {{strategy: {{kind: episodic, write: {write}}}{secrets}}}\n"


async def episode_texts(agent: Agent) -> list[str]:
    await agent.drain(5)
    return [e.text for e in await every_episode(agent)]


@pytest.mark.parametrize("policy", ["redact", "refuse"])
async def test_episodes_written_after_a_run_are_redacted_before_they_are_embedded(
    harness: Harness, policy: str
) -> None:
    main, embedder = ScriptedProvider("main"), RecordingEmbedder()
    agent = await harness.agent(episodic("always", policy), providers={"main": main}, embedder=embedder)
    main.reply("Noted, I will not repeat it.")
    await say(agent)(f"my github token is {GITHUB}, and I like sailing")
    # nobody asked for this write with a tool, so even refuse redacts it (and says so in the audit)
    expected = "User: my github token is [REDACTED:github_token], and I like sailing\nAssistant: Noted, I will not repeat it."
    assert await episode_texts(agent) == [expected]
    assert not any(GITHUB in text for text in embedder.texts)
    # and so is the layer's record of the last recall, which quotes the message it searched with
    assert await secret_audit(agent) == [
        redacted("github_token", "episode", policy),
        redacted("github_token", "layer:episodic", policy),
    ]
    await assert_nowhere(harness, agent, GITHUB, skip=["messages"])


async def test_save_episode_redacts_or_refuses_as_the_policy_says(harness: Harness) -> None:
    main, embedder = ScriptedProvider("main"), RecordingEmbedder()
    agent = await harness.agent(episodic("tool"), providers={"main": main}, embedder=embedder)
    main.call("save_episode", text=f"Ana's Slack bot token: {SLACK}").reply("saved")
    await say(agent)("save this")
    content, is_error = last_tool_result(main)
    assert not is_error and content.endswith(
        "What looked like a secret (slack_token) was stored as a marker, not as written."
    )
    assert await episode_texts(agent) == ["Ana's Slack bot token: [REDACTED:slack_token]"]
    assert not any(SLACK in text for text in embedder.texts)

    strict = await harness.agent(
        episodic("tool", "refuse"), "strict", providers={"main": main}, embedder=embedder
    )
    main.call("save_episode", text=f"Ana's JWT is {JWT}").reply("refused")
    await say(strict)("save this too")
    content, is_error = last_tool_result(main)
    assert is_error and content.startswith("save_episode refused:") and "(jwt)" in content
    assert await episode_texts(strict) == []
    assert not any(JWT in text for text in embedder.texts)
    assert await secret_audit(strict) == [
        ("secret_refused", {"detector": "jwt", "write": "episode", "count": 1, "policy": "refuse"})
    ]


# -- facts, Σ, summaries, compaction ------------------------------------------------------------


async def test_extracted_facts_are_redacted_value_and_source(harness: Harness) -> None:
    main, extract = ScriptedProvider("main"), ScriptedProvider("extract")
    spec = "model: main/m\nmemory: {strategy: {kind: semantic, model: extract/m}}\n"
    agent = await harness.agent(spec, providers={"main": main, "extract": extract})
    fact = {"key": "aws_key", "value": f"uses {AWS_KEY}", "confidence": 0.9, "source": f"my key is {AWS_KEY}"}
    extract.reply(json.dumps({"facts": [fact]}))
    await say(agent)(f"my key is {AWS_KEY}")
    await agent.drain(5)
    rows = [(f.key, f.value, f.source) for f in await every_fact(agent)]
    assert rows == [("aws_key", "uses [REDACTED:aws_access_key]", "my key is [REDACTED:aws_access_key]")]
    assert await secret_audit(agent) == [redacted("aws_access_key", "fact", count=2)]
    await assert_nowhere(harness, agent, AWS_KEY, skip=["messages"])


async def test_a_folded_state_is_redacted_in_the_store_and_in_what_the_next_turn_sees(
    harness: Harness,
) -> None:
    main, fold = ScriptedProvider("main"), ScriptedProvider("fold")
    strategy = {"kind": "state", "spec": "Keep what they work on.", "model": "fold/m"}
    strategy["fields"] = [{"name": "working_on", "description": "ids"}, {"name": "cards", "description": "x"}]
    spec = f"model: main/m\nmemory: {json.dumps({'strategy': strategy})}\n"
    agent = await harness.agent(spec, providers={"main": main, "fold": fold})
    fold.reply(json.dumps({"working_on": f"deploy with {JWT}", "cards": [4242424242424242]}))
    await say(agent)("deploying")
    await agent.drain(5)
    await say(agent)("next")
    sigma = '{"working_on":"deploy with [REDACTED:jwt]","cards":["[REDACTED:card_number]"]}'
    assert sigma in main.requests[-1].system and JWT not in main.requests[-1].system
    assert await secret_audit(agent) == [
        redacted("card_number", "layer:state"),
        redacted("jwt", "layer:state"),
    ]
    await assert_nowhere(harness, agent, JWT, skip=["messages"])


async def test_a_rolling_summary_is_redacted(harness: Harness) -> None:
    main, summariser = ScriptedProvider("main"), ScriptedProvider("sum")
    spec = "model: main/m\nmemory: {strategy: {kind: summarized, every: 2, model: sum/s}}\n"
    agent = await harness.agent(spec, providers={"main": main, "sum": summariser})
    summariser.reply(f"They shared the token {GITHUB} for the CI.")
    for text in ("one", "two", "three"):
        await say(agent)(text)
        await agent.drain(5)
    await say(agent)("four")
    system = main.requests[-1].system
    assert "They shared the token [REDACTED:github_token] for the CI." in system and GITHUB not in system
    assert await secret_audit(agent) == [redacted("github_token", "layer:summarized")]
    await assert_nowhere(harness, agent, GITHUB)


async def test_a_compaction_summary_is_redacted_in_the_store_and_the_hot_thread(harness: Harness) -> None:
    main = ScriptedProvider("main")
    agent = await harness.agent("model: main/m\nmemory: {scope: thread}\n", providers={"main": main})
    for text in ("a", "b", "c"):
        await say(agent)(text)
    main.reply(f"Earlier they pasted {SLACK}.")
    await say(agent)("/compact")
    thread = await agent.state.threads.get("webhook:c1")
    assert thread.summary == "Earlier they pasted [REDACTED:slack_token]."
    assert (await agent.state.store.read(ActiveThread("webhook:c1"))).summary == thread.summary
    assert await secret_audit(agent) == [redacted("slack_token", "compaction")]
    await assert_nowhere(harness, agent, SLACK)


# -- transcripts --------------------------------------------------------------------------------


async def test_redacted_transcripts_the_turn_sees_the_secret_later_turns_see_the_stored_copy(
    harness: Harness,
) -> None:
    main = ScriptedProvider("main")
    spec = "model: main/m\nmemory: {scope: thread, persistent: true}\ntranscripts: {redact_secrets: true}\n"
    agent = await harness.agent(spec, providers={"main": main})
    main.call("remember", key="k", value=OPENAI_KEY).reply(f"Stored {OPENAI_KEY} for you")
    await say(agent)(f"keep {OPENAI_KEY}")
    # the turn's own model calls saw the message as sent, the tool step included
    first, second = main.requests
    assert first.messages[-1].text == f"keep {OPENAI_KEY}"
    assert second.messages[-2].tool_calls[0].arguments == {"key": "k", "value": OPENAI_KEY}

    await say(agent)("what did I say?")
    marker = "[REDACTED:openai_key]"
    replayed = main.requests[-1].messages
    assert replayed[0].text == f"keep {marker}"
    assert replayed[1].tool_calls[0].arguments == {"key": "k", "value": marker}
    assert replayed[3].text == f"Stored {marker} for you"
    # the hot thread is the stored copy, message for message
    hot = await agent.state.threads.get("webhook:c1")
    stored = await agent.state.store.read(ActiveThread("webhook:c1"))
    assert [m.message for m in hot.messages] == [m.message for m in stored.messages]
    await assert_nowhere(harness, agent, OPENAI_KEY)
    transcript = [
        (a, d["write"], d["count"]) for a, d in await secret_audit(agent) if d["write"] == "transcript"
    ]
    assert transcript == [("secret_redacted", "transcript", 3)]


async def test_transcripts_keep_what_was_said_unless_asked(harness: Harness) -> None:
    main = ScriptedProvider("main")
    agent = await harness.agent("model: main/m\nmemory: {scope: thread}\n", providers={"main": main})
    await say(agent)(f"card {CARD}")
    await say(agent)("again")
    assert main.requests[-1].messages[0].text == f"card {CARD}"
    assert await secret_audit(agent) == []


# -- the agent file -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "memory: {secrets: hide}\n",
            "bot.yaml:1:19: memory.secrets: expected 'redact', 'refuse' or 'allow'",
        ),
        (
            "transcripts: {redact: true}\n",
            "bot.yaml:1:15: unknown key 'redact' (did you mean 'redact_secrets'?)",
        ),
    ],
)
def test_bad_settings_are_config_errors_with_their_place(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_agent(Path("bot.yaml"), text=text, env={})
    assert str(caught.value).startswith(expected)


def test_the_defaults_redact_memory_and_keep_transcripts() -> None:
    spec = parse_agent(Path("bot.yaml"), text="purpose: P\n", env={})
    assert spec.memory.secrets == "redact" and spec.transcripts.redact_secrets is False
