"""Config files: every error names the file, line, column and what was expected."""

from __future__ import annotations

import gc
import re
from pathlib import Path
from typing import Literal

import pytest
from pydantic import ValidationError

from agentd.cli import main
from agentd.config.base import Spec
from agentd.config.folder import check_agents, find_agent_file
from agentd.config.loader import _problems, parse_agent, parse_daemon
from agentd.config.refs import BUILTIN_PROVIDERS, OFFLINE_MODEL
from agentd.config.yaml_nodes import to_python
from agentd.daemon import Daemon
from agentd.errors import AgentdError, ConfigError
from agentd.providers.registry import BUILTIN_NAMES


def problem(text: str, name: str = "bot", env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        parse_agent(Path(f"agents/{name}.yaml"), text=text, env=env or {})
    return str(info.value)


def test_minimal_agent_gets_defaults() -> None:
    spec = parse_agent(Path("agents/helper.yaml"), text="purpose: hi\n", env={})
    assert spec.name == "helper"
    assert spec.model.name == OFFLINE_MODEL
    assert spec.memory.scope == "none" and spec.memory.persistent is False
    assert spec.memory.compact_at_tokens == 50000
    assert spec.max_tool_steps == 8
    assert spec.channels.enabled() == []


def test_model_shorthand_and_full_form() -> None:
    short = parse_agent(Path("a.yaml"), text="model: openai/gpt-4.1-mini\n", env={})
    full = parse_agent(
        Path("a.yaml"),
        text="model:\n  name: openai/gpt-4.1-mini\n  small: ollama/llama3.2\n  temperature: 0.2\n  max_output_tokens: 500\n",
        env={},
    )
    assert short.model.name == full.model.name == "openai/gpt-4.1-mini"
    assert full.model.small == "ollama/llama3.2"
    assert full.model.temperature == 0.2


def test_spec_is_frozen() -> None:
    spec = parse_agent(Path("a.yaml"), text="purpose: hi\n", env={})
    with pytest.raises(Exception, match="frozen"):
        spec.purpose = "other"  # type: ignore[misc]


def test_invalid_yaml_names_file_line_and_column() -> None:
    msg = problem("purpose: hi\nmodel: [openai/x\n")
    assert msg.startswith("agents/bot.yaml:3:1: invalid YAML")
    assert "expected ',' or ']'" in msg


def test_unknown_key_is_an_error_with_a_suggestion() -> None:
    msg = problem("purpose: hi\nmemory:\n  scope: thread\n  persistant: true\n")
    assert "agents/bot.yaml:4:3: unknown key 'persistant' (did you mean 'persistent'?)" in msg


def test_a_misspelt_strategy_kind_gets_a_suggestion_at_the_value() -> None:
    msg = problem("purpose: hi\nmemory:\n  strategy: {kind: episodc}\n")
    assert msg == (
        "agents/bot.yaml:3:20: memory.strategy: unknown kind 'episodc' (did you mean 'episodic'?); "
        "expected one of: none, full, window, summarized, episodic, semantic, state, composite"
    )
    msg = problem(
        "purpose: hi\nmemory:\n  strategy:\n    kind: composite\n    layers:\n      - {kind: windw}\n"
    )
    assert msg.startswith(
        "agents/bot.yaml:6:16: memory.strategy.layers.0: unknown kind 'windw' (did you mean 'window'?)"
    )


def test_wrong_type_names_the_field_and_what_was_expected() -> None:
    msg = problem("memory:\n  scope: thread\n  compact_at_tokens: lots\n")
    assert "agents/bot.yaml:3:22: memory.compact_at_tokens" in msg
    msg = problem("memory:\n  scope: always\n")
    assert "agents/bot.yaml:2:10: memory.scope: expected 'none' or 'thread'" in msg
    msg = problem("max_tool_steps: 0\n")
    assert "agents/bot.yaml:1:17: max_tool_steps" in msg


def test_a_wrong_type_is_one_error_for_its_field() -> None:
    msg = problem('memory:\n  compact_at_tokens: "abc"\n')
    assert msg == "agents/bot.yaml:2:22: memory.compact_at_tokens: expected a token count or false, got 'abc'"


@pytest.mark.parametrize(
    ("value", "threshold"),
    [("1234", 1234), ('"1234"', 1234), ("false", False)],
    ids=["int", "quoted", "false"],
)
def test_compaction_threshold_is_a_count_or_false(value: str, threshold: int | bool) -> None:
    spec = parse_agent(Path("a.yaml"), text=f"memory: {{compact_at_tokens: {value}}}\n", env={})
    assert spec.memory.compact_at_tokens == threshold


def test_a_value_every_member_of_a_union_refuses_is_one_error() -> None:
    class Either(Spec):
        size: int | Literal["auto"]

    located = to_python("x.yaml", "size: big\n", {})
    with pytest.raises(ValidationError) as info:
        Either.model_validate(located.data)
    assert [str(p) for p in _problems("x.yaml", located, info.value, Either)] == [
        "x.yaml:1:7: size: input should be a valid integer, unable to parse string as an integer (got 'big'),"
        " or expected 'auto'"
    ]


def test_problems_are_listed_in_file_order() -> None:
    msg = problem("memory:\n  persistant: true\n  compact_at_tokens: lots\nmodel: nowhere\n")
    assert [line.split(":")[1] for line in msg.splitlines()] == ["2", "3", "4"]


def test_unset_env_var_is_named_with_its_location() -> None:
    msg = problem("purpose: hi\nchannels:\n  discord: {token: '${DISCORD_TOKEN}'}\n")
    assert "agents/bot.yaml:3:20: environment variable DISCORD_TOKEN is not set" in msg


def test_env_interpolation_and_defaults() -> None:
    spec = parse_agent(
        Path("a.yaml"),
        text="model: ${AGENTD_MODEL:-offline}\nmemory:\n  compact_at_tokens: ${LIMIT}\n  scope: thread\n",
        env={"LIMIT": "1234"},
    )
    assert spec.model.name == OFFLINE_MODEL
    assert spec.memory.compact_at_tokens == 1234
    spec = parse_agent(
        Path("a.yaml"), text="model: ${AGENTD_MODEL:-offline}\n", env={"AGENTD_MODEL": "openai/x"}
    )
    assert spec.model.name == "openai/x"


def test_an_unquoted_variable_reads_as_if_its_value_were_written_there() -> None:
    # both YAML parsers (libyaml's first, the pure-Python one for errors) must agree on this
    env = {"X": "123"}
    assert parse_agent(Path("a.yaml"), text='purpose: "${X}"\n', env=env).purpose == "123"
    with pytest.raises(ConfigError, match=r"a.yaml:1:10: purpose: input should be a valid string"):
        parse_agent(Path("a.yaml"), text="purpose: ${X}\n", env=env)


def test_parsing_leaves_no_cyclic_garbage() -> None:
    # a daemon loads 10,000 files with the cyclic collector off (agentd.daemon.daemon): nothing may
    # be left for it, or every file's node tree would stay in memory
    text = "purpose: hi\nmemory: {scope: thread, strategy: {kind: window, messages: 4}}\nchannels: {webhook: {}}\n"
    parse_agent(Path("a.yaml"), text=text, env={})  # whatever the first call imports
    gc.collect()
    gc.disable()
    try:
        for _ in range(3):
            parse_agent(Path("a.yaml"), text=text, env={})
        assert gc.collect() == 0
    finally:
        gc.enable()


def test_bad_agent_name_from_the_file_name() -> None:
    msg = problem("purpose: hi\n", name="My Agent")
    assert "agents/My Agent.yaml" in msg and "must match [a-z0-9][a-z0-9_-]*" in msg


def test_bad_model_reference() -> None:
    msg = problem("model: gpt4\n")
    assert "expected 'provider/model'" in msg


def test_name_key_is_refused() -> None:
    assert "an agent's name is its file name" in problem("name: other\n")


@pytest.mark.parametrize("text", ["", "# to do\n", "{}\n"], ids=["empty", "only-comments", "empty-mapping"])
def test_an_empty_agent_file_is_refused(text: str) -> None:
    assert problem(text) == (
        "agents/bot.yaml: the file is empty: an agent needs at least its purpose, "
        "e.g. `purpose: You answer questions.`"
    )


def test_the_unknown_key_hint_never_offers_name() -> None:
    assert problem("nme: other\n") == (
        "agents/bot.yaml:1:1: unknown key 'nme'; "
        "expected one of: purpose, model, memory, transcripts, channels, max_tool_steps, subagents, tools, media"
    )


def test_compaction_can_be_disabled_but_not_set_true() -> None:
    spec = parse_agent(Path("a.yaml"), text="memory: {scope: thread, compact_at_tokens: false}\n", env={})
    assert spec.memory.compact_at_tokens is False
    assert "expected a token count or false" in problem("memory: {compact_at_tokens: true}\n")


def test_daemon_file(tmp_path: Path) -> None:
    path = tmp_path / "agentd.yaml"
    assert parse_daemon(path).http.port == 8765  # missing file: defaults
    path.write_text(
        "providers:\n  local:\n    kind: ollama\n    base_url: http://127.0.0.1:1/v1\nhttp:\n  port: 9000\n"
    )
    spec = parse_daemon(path, env={})
    assert spec.providers["local"].kind == "ollama" and spec.http.port == 9000
    path.write_text("http:\n  prot: 9000\n")
    with pytest.raises(ConfigError, match=r"agentd.yaml:2:3: unknown key 'prot' \(did you mean 'port'\?\)"):
        parse_daemon(path, env={})


def test_check_reports_every_broken_file_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "good.yaml").write_text("purpose: fine\n")
    (agents / "bad.yaml").write_text("purpose: [\n")
    (agents / "worse.yaml").write_text("memroy: {}\n")
    result = check_agents(agents)
    assert [a.name for a in result.agents] == ["good"]
    assert len(result.errors) == 2
    assert main(["check", str(agents)]) == 1
    err = capsys.readouterr().err
    assert "bad.yaml:2:1: invalid YAML" in err and "worse.yaml:1:1: unknown key 'memroy'" in err
    (agents / "bad.yaml").unlink()
    (agents / "worse.yaml").unlink()
    assert main(["check", str(agents)]) == 0
    assert "ok: 1 agent(s): good" in capsys.readouterr().out


def test_example_agents_are_valid() -> None:
    root = Path(__file__).parent.parent
    result = check_agents(root / "agents", root / "agentd.yaml")
    assert not result.errors, result.errors
    names = {a.name for a in result.agents}
    assert {"assistant", "webhook-handler"} <= names


def test_daemon_defaults_give_agents_without_a_model_their_model(tmp_path: Path) -> None:
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "plain.yaml").write_text("purpose: hi\n")
    (agents / "own.yaml").write_text("model: anthropic/claude-x\n")
    (tmp_path / "agentd.yaml").write_text("defaults:\n  model: openai/gpt-4.1-mini\n")
    result = check_agents(agents, tmp_path / "agentd.yaml")
    assert {a.name: a.model.name for a in result.agents} == {
        "plain": "openai/gpt-4.1-mini",
        "own": "anthropic/claude-x",
    }


def test_an_empty_token_means_no_token(tmp_path: Path) -> None:
    path = tmp_path / "agentd.yaml"
    path.write_text('http: {token: "${AGENTD_TOKEN:-}"}\n')
    assert parse_daemon(path, env={}).http.token is None
    assert parse_daemon(path, env={"AGENTD_TOKEN": "t0k"}).http.token == "t0k"


# -- `agentd check` refuses what `agentd run` refuses ------------------------------------------------


async def refused_by_run(root: Path) -> str:
    """What `agentd run` says about the folder: the error that stops it, or the agents it refused."""
    try:
        daemon = Daemon(root / "agents", root / "data", reload_interval=60)
        await daemon.start()
    except AgentdError as e:
        return str(e)
    try:
        return last_errors(daemon)
    finally:
        await daemon.shutdown()


def last_errors(daemon: Daemon) -> str:
    return "\n".join(a["last_error"] for a in daemon.describe_agents() if a["last_error"])


def write_folder(root: Path, agents: dict[str, str], daemon_yaml: str | None = None) -> Path:
    """agents/<file> for each entry, and agentd.yaml beside the folder when given; returns the folder."""
    (root / "agents").mkdir()
    for file, text in agents.items():
        (root / "agents" / file).write_text(text)
    if daemon_yaml is not None:
        (root / "agentd.yaml").write_text(daemon_yaml)
    return root / "agents"


def checked(root: Path, capsys: pytest.CaptureFixture[str], target: str = "agents") -> tuple[int, str]:
    code = main(["check", str(root / target)])
    out = capsys.readouterr()
    return code, out.out + out.err


@pytest.mark.parametrize(
    ("daemon_yaml", "agent_yaml", "why"),
    [
        ("embedder: foo/bar\n", "purpose: hi\n", "unknown provider 'foo'"),
        ("embedder: hash/4\n", "purpose: hi\n", "dimension must be 8..8192"),
        # refused either way: without the extra ("install the extra"), or with it (not a model folder)
        ("embedder: local/./no-such-folder\n", "purpose: hi\n", "embedder local/./no-such-folder: "),
        ("", "model: nowhere/x\n", "unknown provider 'nowhere' in model 'nowhere/x'"),
        ("", "model: {name: offline, small: nowhere/x}\n", "unknown provider 'nowhere'"),
        ("", "memory: {strategy: {kind: summarized, model: nowhere/x}}\n", "unknown provider 'nowhere'"),
        (
            "",
            "memory:\n  strategy:\n    kind: composite\n    layers:\n      - {kind: semantic, model: nowhere/x}\n",
            "unknown provider 'nowhere'",
        ),
        (
            "",
            "subagents: [{agent: other, memory_override: {kind: summarized, model: nowhere/x}}]\n",
            "unknown provider 'nowhere'",
        ),
        ("memory_extractor_model: nowhere/x\n", "purpose: hi\n", "unknown provider 'nowhere'"),
        ("defaults: {model: nowhere/x}\n", "purpose: hi\n", "unknown provider 'nowhere'"),
        ("http: {host: 0.0.0.0}\n", "purpose: hi\n", "refusing to listen on 0.0.0.0 without a token"),
    ],
    ids=[
        "embedder-provider",
        "embedder-hash-dimension",
        "embedder-local-model",
        "model",
        "model-small",
        "strategy-model",
        "composite-layer-model",
        "subagent-override-model",
        "memory-extractor-model",
        "default-model",
        "http-host-without-token",
    ],
)
async def test_check_refuses_what_run_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], daemon_yaml: str, agent_yaml: str, why: str
) -> None:
    write_folder(tmp_path, {"bot.yaml": agent_yaml}, daemon_yaml)
    assert why in await refused_by_run(tmp_path)
    code, output = checked(tmp_path, capsys)
    assert code == 1 and why in output
    assert re.search(r"\.yaml:\d+:\d+: ", output), output  # located to the line


async def test_providers_declared_in_agentd_yaml_pass_check_and_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_folder(
        tmp_path,
        {
            "bot.yaml": "model: {name: lab/llama, small: ollama/llama3.2}\nmemory: {strategy: {kind: semantic, model: lab/x}}\n"
        },
        "providers: {lab: {kind: ollama}}\nembedder: lab/nomic-embed-text\nmemory_extractor_model: lab/m\n",
    )
    assert await refused_by_run(tmp_path) == ""
    assert checked(tmp_path, capsys) == (0, "ok: 1 agent(s): bot\n")


def test_config_and_the_registry_agree_on_the_built_in_providers() -> None:
    assert set(BUILTIN_PROVIDERS) == set(BUILTIN_NAMES)


# -- `agentd check` of one file ----------------------------------------------------------------------


def test_check_of_one_agent_file_checks_that_file_with_agentd_yaml_beside_its_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_folder(
        tmp_path,
        {"good.yaml": "model: lab/m\n", "broken.yaml": "memroy: {}\n"},
        "providers: {lab: {kind: ollama}}\n",
    )
    assert checked(tmp_path, capsys, "agents/good.yaml") == (0, "ok: 1 agent(s): good\n")  # lab is declared
    code, output = checked(tmp_path, capsys, "agents/broken.yaml")
    assert code == 1 and "broken.yaml:1:1: unknown key 'memroy'" in output and "good" not in output


@pytest.mark.parametrize(
    ("target", "why"),
    [
        ("agents/missing.yaml", "agents/missing.yaml: no such agent file"),
        ("agents/notes.txt", "agents/notes.txt: is not an agent file"),
        ("nowhere", "nowhere: agents folder does not exist"),
    ],
)
def test_check_of_something_that_is_not_an_agent_file_or_folder_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str, why: str
) -> None:
    write_folder(tmp_path, {"notes.txt": "purpose: hi\n"})
    code, output = checked(tmp_path, capsys, target)
    assert code == 1 and f"{tmp_path}/{why}" in output


# -- <name>.yml --------------------------------------------------------------------------------------


def test_a_yml_file_is_an_agent_like_a_yaml_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_folder(tmp_path, {"short.yml": "purpose: hi\n", "long.yaml": "purpose: hi\n"})
    assert checked(tmp_path, capsys) == (0, "ok: 2 agent(s): long, short\n")
    assert find_agent_file(tmp_path / "agents", "short") == tmp_path / "agents" / "short.yml"


def test_x_yaml_and_x_yml_are_one_agent_defined_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_folder(tmp_path, {"x.yaml": "purpose: one\n", "x.yml": "purpose: two\n"})
    code, output = checked(tmp_path, capsys)
    assert code == 1
    assert (
        f"{tmp_path}/agents/x.yaml: {tmp_path}/agents/x.yml defines agent 'x' too: keep one of them" in output
    )
    code, output = checked(tmp_path, capsys, "agents/x.yml")
    assert code == 1 and "x.yaml defines agent 'x' too" in output


async def test_run_refuses_a_twin_added_beside_a_running_agent_and_recovers_when_it_goes(
    tmp_path: Path,
) -> None:
    agents = write_folder(tmp_path, {"x.yml": "purpose: one\n"})
    daemon = Daemon(agents, tmp_path / "data", reload_interval=60)
    await daemon.start()

    def purpose() -> str:
        agent = daemon.agent("x")
        assert agent is not None
        return agent.spec.purpose

    try:
        assert purpose() == "one" and last_errors(daemon) == ""
        (agents / "x.yaml").write_text("purpose: two\n")
        await daemon.sync_agents()
        assert "defines agent 'x' too" in last_errors(daemon)
        assert purpose() == "one"  # the last good definition keeps running
        (agents / "x.yml").unlink()
        await daemon.sync_agents()
        assert last_errors(daemon) == "" and purpose() == "two"
        assert daemon.describe_agents()[0]["file"] == str(agents / "x.yaml")
    finally:
        await daemon.shutdown()
