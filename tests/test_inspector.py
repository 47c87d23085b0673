"""The memory inspector: GET /agents/{agent}/conversations/{key}/memory and `agentd inspect`."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from agentd.cli import main
from agentd.daemon import Daemon
from agentd.events import InboundEvent
from tests.support import Harness, open_api, say, send

ASSISTANT = "memory: {scope: thread, persistent: true}\nchannels: {webhook: {}}\n"
BLANK = "memory: {scope: none}\nchannels: {webhook: {}}\n"
LAYERED = (
    "memory:\n  strategy: {kind: composite, layers: [{kind: window, messages: 2}, {kind: full}]}\n"
    "channels: {webhook: {}}\n"
)


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[tuple[Daemon, httpx.AsyncClient]]:
    daemon, client = await open_api(tmp_path, {"assistant": ASSISTANT, "blank": BLANK})
    yield daemon, client
    await client.aclose()
    await daemon.shutdown()


async def test_full_transcript_is_one_layer_with_persistent_keys(
    api: tuple[Daemon, httpx.AsyncClient],
) -> None:
    _daemon, client = api
    await send(client, "assistant", "c", "hello")
    await send(client, "assistant", "c", "remember color: blue")
    r = await client.get("/agents/assistant/conversations/webhook:c/memory")
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["agent"], body["conversation_key"], body["strategy"]) == ("assistant", "webhook:c", "full")
    assert body["thread_id"] == 1
    [layer] = body["layers"]
    assert layer["kind"] == "full" and layer["compact_at_tokens"] == 50000
    texts = [part.get("text") for m in layer["messages"] for part in m["parts"]]
    assert texts[0] == "hello" and "remember color: blue" in texts and len(layer["messages"]) == 6
    assert body["persistent"] == {"scope": "agent", "keys": ["color"]}


async def test_memory_route_and_transcript_route_do_not_shadow_each_other(
    api: tuple[Daemon, httpx.AsyncClient],
) -> None:
    daemon, client = api
    await send(client, "assistant", "c", "hello")
    # a key with a slash (channels may make them): both routes must still pick the right key
    agent = daemon.agent("assistant")
    assert agent is not None
    await agent.handle(InboundEvent("assistant", "slack:T1/C2", "from slack", "slack", user_id="bo"))

    transcript = (await client.get("/agents/assistant/conversations/webhook:c")).json()
    assert (
        transcript["conversation_key"] == "webhook:c"
        and "system" in transcript
        and "layers" not in transcript
    )
    inspected = (await client.get("/agents/assistant/conversations/webhook:c/memory")).json()
    assert inspected["conversation_key"] == "webhook:c" and "layers" in inspected

    slashed = (await client.get("/agents/assistant/conversations/slack:T1/C2/memory")).json()
    assert slashed["conversation_key"] == "slack:T1/C2"
    assert slashed["layers"][0]["messages"][0]["parts"][0]["text"] == "from slack"
    plain = (await client.get("/agents/assistant/conversations/slack:T1/C2")).json()
    assert plain["conversation_key"] == "slack:T1/C2" and len(plain["messages"]) == 2


async def test_no_history_strategy_and_unknown_conversation(api: tuple[Daemon, httpx.AsyncClient]) -> None:
    _daemon, client = api
    await send(client, "blank", "c", "hello")
    body = (await client.get("/agents/blank/conversations/webhook:c/memory")).json()
    assert body["strategy"] == "none" and "persistent" not in body
    assert body["layers"] == [{"kind": "none", "layer": "none", "sees": "nothing: every run starts blank"}]

    fresh = (await client.get("/agents/assistant/conversations/webhook:never-seen/memory")).json()
    assert fresh["thread_id"] is None and fresh["layers"][0]["messages"] == []


async def test_unknown_agent_is_404(api: tuple[Daemon, httpx.AsyncClient]) -> None:
    _daemon, client = api
    r = await client.get("/agents/nobody/conversations/webhook:c/memory")
    assert r.status_code == 404 and "no agent named 'nobody'" in r.json()["error"]


@pytest.mark.parametrize(
    "key",
    ["no-colon", "webhook:has%20space", "Webhook:upper", ":empty-channel", "webhook:", "webhook:tab%09x"],
)
async def test_bad_keys_are_4xx_with_a_reason(api: tuple[Daemon, httpx.AsyncClient], key: str) -> None:
    _daemon, client = api
    r = await client.get(f"/agents/assistant/conversations/{key}/memory")
    assert 400 <= r.status_code < 500, r.text
    assert "conversation key" in r.json()["error"] or r.status_code == 404


async def test_odd_but_valid_key_characters_never_500(api: tuple[Daemon, httpx.AsyncClient]) -> None:
    _daemon, client = api
    for key in ("webhook:%00", "webhook:';DROP(TABLE)runs;--", "webhook:ü%E2%80%AE", "webhook:" + "x" * 256):
        r = await client.get(f"/agents/assistant/conversations/{key}/memory")
        assert r.status_code == 200, (key, r.text)
        assert r.json()["thread_id"] is None
    r = await client.get("/agents/assistant/conversations/webhook:" + "x" * 257 + "/memory")
    assert r.status_code == 400


async def test_the_inspector_needs_the_token(tmp_path: Path) -> None:
    daemon, client = await open_api(tmp_path, {"assistant": ASSISTANT}, token="s3cret")
    try:
        r = await client.get("/agents/assistant/conversations/webhook:c/memory")
        assert r.status_code == 401
        ok = await client.get(
            "/agents/assistant/conversations/webhook:c/memory", headers={"Authorization": "Bearer s3cret"}
        )
        assert ok.status_code == 200 and ok.json()["strategy"] == "full"
    finally:
        await client.aclose()
        await daemon.shutdown()


async def test_a_composite_reports_each_layer_in_order(tmp_path: Path) -> None:
    pytest.importorskip("agentd.memory.composite")
    pytest.importorskip("agentd.memory.window")
    daemon, client = await open_api(tmp_path, {"layered": LAYERED})
    try:
        for text in ("one", "two", "three"):
            await send(client, "layered", "c", text)
        body = (await client.get("/agents/layered/conversations/webhook:c/memory")).json()
        assert body["strategy"] == "composite"
        assert [(layer["layer"], layer["kind"]) for layer in body["layers"]] == [
            ("0:window", "window"),
            ("1:full", "full"),
        ]
        window, full = body["layers"]
        assert len(window["messages"]) == 2 and len(full["messages"]) == 6
    finally:
        await client.aclose()
        await daemon.shutdown()


STRATEGIES = {
    "window": "{kind: window, messages: 2}",
    "summarized": "{kind: summarized, every: 2}",
    "state": "{kind: state, spec: track the trip, fields: [{name: destination, description: where to}]}",
    "episodic": "{kind: episodic, top_k: 3}",
    "semantic": "{kind: semantic}",
    "composite": "{kind: composite, layers: [{kind: window, messages: 2}, {kind: episodic}, {kind: semantic}]}",
}
MODULES = {"composite": ("composite", "window", "episodic", "semantic")}


@pytest.mark.parametrize("kind", list(STRATEGIES))
async def test_every_strategy_answers_the_api_and_the_page(tmp_path: Path, kind: str) -> None:
    """Whatever a strategy's inspect() reports comes out as JSON and as a page (never a 500)."""
    for module in MODULES.get(kind, (kind,)):
        pytest.importorskip(f"agentd.memory.{module}")
    yaml_text = f"memory:\n  persistent: true\n  strategy: {STRATEGIES[kind]}\nchannels: {{webhook: {{}}}}\n"
    daemon, client = await open_api(tmp_path, {"agent": yaml_text})
    try:
        for text in ("we fly to <Lisbon>", "remember color: blue", "and then?"):
            await send(client, "agent", "c", text)
        await daemon.agent("agent").drain(5)  # type: ignore[union-attr]
        r = await client.get("/agents/agent/conversations/webhook:c/memory")
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["strategy"] == kind and body["layers"]
        expected = STRATEGIES[kind].count("kind:") - (1 if kind == "composite" else 0)
        assert len(body["layers"]) == expected
        page = await client.get("/ui/agents/agent/conversations/webhook:c")
        assert page.status_code == 200, page.text
        assert page.text.count('<section class="layer">') == expected + 1  # + persistent memory
        assert "<Lisbon>" not in page.text
        assert not re.findall(r"<(?:dt|th)>\w*_\w*</", page.text)  # labels for people, not snake_case keys
    finally:
        await client.aclose()
        await daemon.shutdown()


# -- agentd inspect ---------------------------------------------------------------------------------


def seed(root: Path, yaml_text: str, key: str, texts: list[str]) -> None:
    """Write agents/assistant.yaml and give the agent a conversation in data/assistant.sqlite."""
    (root / "agents").mkdir(exist_ok=True)
    (root / "agents" / "assistant.yaml").write_text(yaml_text)

    async def go() -> None:
        harness = Harness(root / "data")
        try:
            agent = await harness.agent(yaml_text, "assistant")
            for text in texts:
                await say(agent, key, "ana")(text)
        finally:
            await harness.close()

    asyncio.run(go())


def cli(root: Path, *args: str) -> list[str]:
    return ["inspect", *args, "--agents", str(root / "agents"), "--data", str(root / "data")]


def test_cli_prints_each_layer_readably(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seed(tmp_path, ASSISTANT, "webhook:c", ["hello", "remember color: blue"])
    assert main(cli(tmp_path, "assistant", "webhook:c")) == 0
    out = capsys.readouterr().out
    assert out.startswith("agent assistant · conversation webhook:c · strategy full · thread 1")
    assert "== layer full ==" in out and "compact_at_tokens: 50000" in out
    assert "  user (ana): remember color: blue" in out
    assert '  assistant: -> remember({"key": "color", "value": "blue"})' in out
    assert "== persistent memory ==" in out and "  - color" in out


def test_cli_json_matches_the_api_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seed(tmp_path, ASSISTANT, "webhook:c", ["hello"])
    assert main([*cli(tmp_path, "assistant", "webhook:c"), "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["strategy"] == "full" and body["thread_id"] == 1
    assert [m["role"] for m in body["layers"][0]["messages"]] == ["user", "assistant"]


def test_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seed(tmp_path, ASSISTANT, "webhook:c", ["hello"])
    assert main(cli(tmp_path, "assistant", "not a key")) == 2
    assert "not a conversation key" in capsys.readouterr().err
    assert main(cli(tmp_path, "nobody", "webhook:c")) == 1
    assert "no agent file" in capsys.readouterr().err
    (tmp_path / "agents" / "fresh.yaml").write_text(ASSISTANT)
    assert main(cli(tmp_path, "fresh", "webhook:c")) == 1
    assert "no data file" in capsys.readouterr().err
    assert not (tmp_path / "data" / "fresh.sqlite").exists()  # inspecting never creates a file
