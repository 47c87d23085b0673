"""Providers that cannot be used never stop the daemon: the README's agentd.yaml starts as pasted, and an
agent whose provider lacks a key or a variable says so in GET /agents from the start."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from agentd.cli import main
from agentd.daemon import Daemon
from agentd.http.app import create_app
from testkit.fake_llm import FakeLLM
from tests.daemon_process import DaemonProcess

ROOT = Path(__file__).parent.parent
GROQ = 'providers:\n  groq: {kind: openai, base_url: "%s", api_key: "${GROQ_API_KEY}"}\n'


def readme_daemon_file() -> str:
    blocks = re.findall(r"^```yaml\n(.*?)^```", (ROOT / "README.md").read_text(), flags=re.M | re.S)
    [daemon_file] = [block for block in blocks if block.startswith("providers:")]
    return daemon_file


@pytest.fixture
def no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("GROQ_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "AGENTD_TOKEN"):
        monkeypatch.delenv(var, raising=False)


async def test_the_readme_agentd_yaml_starts_as_pasted(tmp_path: Path, no_keys: None) -> None:
    (tmp_path / "agents").mkdir()
    for agent in (ROOT / "agents").glob("*.yaml"):
        (tmp_path / "agents" / agent.name).write_text(agent.read_text())
    (tmp_path / "agentd.yaml").write_text(readme_daemon_file())
    daemon = await DaemonProcess(tmp_path).start()
    try:
        assert daemon.say("hello")["error"] is None
    finally:
        daemon.stop()
    log = daemon.log.read_text()
    assert "provider groq cannot be used (agentd.yaml:2:" in log
    assert "environment variable GROQ_API_KEY is not set); no agent uses it" in log


def test_check_passes_it_with_a_warning(
    tmp_path: Path, no_keys: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "a.yaml").write_text("purpose: x\n")
    (tmp_path / "agentd.yaml").write_text(readme_daemon_file())
    monkeypatch.chdir(tmp_path)
    assert main(["check", "agents"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("warning: agentd.yaml:2:")
    assert (
        "providers.groq.api_key: environment variable GROQ_API_KEY is not set: calls to provider groq" in err
    )


@pytest.fixture
def groq() -> AsyncIterator[FakeLLM]:
    with FakeLLM() as fake:
        yield fake


async def open_daemon(
    root: Path, agents: dict[str, str], daemon_file: str
) -> tuple[Daemon, httpx.AsyncClient]:
    (root / "agents").mkdir()
    for name, text in agents.items():
        (root / "agents" / f"{name}.yaml").write_text(text)
    (root / "agentd.yaml").write_text(daemon_file)
    daemon = Daemon(root / "agents", root / "data", reload_interval=60)
    await daemon.start()
    client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(daemon)), base_url="http://agentd"
    )
    return daemon, client


async def test_an_agent_on_a_provider_with_an_unset_variable_starts_and_says_why(
    tmp_path: Path, no_keys: None, groq: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-must-not-leak")
    agent = "model: groq/llama-3\nchannels: {webhook: {}}\n"
    daemon, client = await open_daemon(tmp_path, {"fast": agent}, GROQ % groq.openai_base_url)
    try:
        [listed] = (await client.get("/agents")).json()["agents"]
        assert listed["status"] == "running"
        [warning] = listed["warnings"]
        assert warning.startswith("provider groq (model llama-3) cannot be used: ")
        assert "agentd.yaml:2:" in warning and "GROQ_API_KEY is not set; set it and restart agentd" in warning
        reply = (
            await client.post("/agents/fast/messages", json={"conversation_id": "c", "text": "hi"})
        ).json()
        assert reply["error"] == "provider_error" and "GROQ_API_KEY is not set" in reply["reply"]
        assert groq.requests == []  # nothing was sent, least of all OpenAI's key
    finally:
        await client.aclose()
        await daemon.shutdown()


async def test_a_missing_api_key_shows_in_get_agents_before_any_message(
    tmp_path: Path, no_keys: None
) -> None:
    agents = {
        "remote": "model: {name: openai/gpt-4.1-mini, small: anthropic/claude-haiku}\n",
        "local": "model: offline\n",
    }
    daemon, client = await open_daemon(tmp_path, agents, "")
    try:
        listed = {a["name"]: a for a in (await client.get("/agents")).json()["agents"]}
        assert listed["local"]["warnings"] == []
        assert listed["remote"]["warnings"] == [
            "provider anthropic (model claude-haiku): no API key: set ANTHROPIC_API_KEY or "
            "providers.anthropic.api_key in agentd.yaml",
            "provider openai (model gpt-4.1-mini): no API key: set OPENAI_API_KEY or "
            "providers.openai.api_key in agentd.yaml",
        ]
    finally:
        await client.aclose()
        await daemon.shutdown()
