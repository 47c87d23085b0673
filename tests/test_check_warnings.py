"""What `agentd check` and `GET /agents` say before the first message (issue 17, items 18 and 19): a
sub-agent naming no agent of the folder is an error; a used provider without its key, an episodic layer
without an embedder and semantic/state layers with only the offline model are warnings."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentd.cli import main
from tests.support import serving

STATE = "{kind: state, spec: track the trip, fields: [{name: city, description: where}]}"


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GROQ_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    (tmp_path / "agents").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


def check(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["check", *args])
    return code, capsys.readouterr().err


def test_a_sub_agent_that_does_not_exist_is_an_error_with_its_line(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (folder / "agents" / "boss.yaml").write_text("purpose: x\nsubagents:\n  - {agent: researcher}\n")
    (folder / "agents" / "helper.yaml").write_text("purpose: y\n")
    code, err = check(capsys, "agents")
    assert code == 1
    assert "agents/boss.yaml:3:13: subagents.agent: no agent named 'researcher' in this folder" in err
    code, err = check(capsys, "agents/boss.yaml")  # one file: checked against its folder's agents
    assert code == 1 and "no agent named 'researcher'" in err
    (folder / "agents" / "researcher.yaml").write_text("purpose: z\n")
    code, err = check(capsys, "agents/boss.yaml")
    assert code == 0, err


def test_a_used_provider_without_its_key_is_warned_about_on_the_agent(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (folder / "agents" / "a.yaml").write_text("purpose: x\nmodel: openai/gpt-4.1-mini\n")
    (folder / "agents" / "b.yaml").write_text("purpose: y\n")
    code, err = check(capsys, "agents")
    assert code == 0
    assert err == (
        "warning: agents/a.yaml: provider openai (model gpt-4.1-mini): no API key: set OPENAI_API_KEY or "
        "providers.openai.api_key in agentd.yaml\n"
    )


def test_a_declared_provider_with_an_unset_variable_is_warned_once_where_it_is_used(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (folder / "agentd.yaml").write_text(
        'providers:\n  groq: {kind: openai, base_url: "http://127.0.0.1:9/v1", api_key: "${GROQ_API_KEY}"}\n'
    )
    (folder / "agents" / "a.yaml").write_text("purpose: x\nmodel: groq/llama-3\n")
    code, err = check(capsys, "agents")
    assert code == 0
    [warning] = err.splitlines()
    assert warning.startswith("warning: agents/a.yaml: provider groq (model llama-3) cannot be used: ")
    assert "GROQ_API_KEY is not set" in warning


def test_memory_that_will_do_less_than_it_says_is_warned_about(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (folder / "agents" / "ep.yaml").write_text("purpose: x\nmemory: {strategy: {kind: episodic}}\n")
    (folder / "agents" / "facts.yaml").write_text("purpose: x\nmemory: {strategy: {kind: semantic}}\n")
    (folder / "agents" / "sigma.yaml").write_text(f"purpose: x\nmemory: {{strategy: {STATE}}}\n")
    code, err = check(capsys, "agents")
    assert code == 0
    assert err.splitlines() == [
        "warning: agents/ep.yaml: memory.strategy episodic: no embedder (agentd.yaml: embedder:, e.g. "
        "hash/256): episodes are recalled by keywords only",
        "warning: agents/facts.yaml: memory.strategy semantic: only the offline model, which extracts no "
        "facts; name a model (the layer's model:, or memory_extractor_model in agentd.yaml)",
        "warning: agents/sigma.yaml: memory.strategy state: only the offline model, which cannot fold: a "
        "window of the recent tail; name a model (the layer's model:, or memory_extractor_model in agentd.yaml)",
    ]
    (folder / "agentd.yaml").write_text("embedder: hash/256\nmemory_extractor_model: ollama/llama3.2\n")
    assert check(capsys, "agents") == (0, "")


async def test_get_agents_shows_the_same_memory_warnings(tmp_path: Path) -> None:
    agents = {
        "ep": "purpose: x\nmemory: {strategy: {kind: composite, layers: [{kind: window, messages: 4}, "
        "{kind: episodic}]}}\n",
        "plain": "purpose: x\n",
    }
    async with serving(tmp_path, agents) as (_, client):
        listed = {a["name"]: a for a in (await client.get("/agents")).json()["agents"]}
    assert listed["plain"]["warnings"] == []
    assert listed["ep"]["warnings"] == [
        "memory.strategy episodic: no embedder (agentd.yaml: embedder:, e.g. hash/256): episodes are "
        "recalled by keywords only"
    ]
