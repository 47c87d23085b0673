"""docs/agent.schema.json and docs/agentd.schema.json say what `agentd check` says, both ways.

An editor validates an agent file with the schema long before `agentd check` runs: a schema that refuses
the README's `model: provider/model`, or accepts a pattern the loader refuses, teaches the wrong file.
Each row of the table is a file; the real `jsonschema` library (and the check-jsonschema command an
editor or a pre-commit hook runs) and the real loader (`agentd check`'s check_agents) must give the row's
answer. What only agentd.yaml or the environment can tell (which providers exist, which servers a
pattern names) is beyond a schema: LOADER_ONLY pins that boundary, schema-valid and loader-invalid.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from agentd.cli.init import init_folder
from agentd.config.folder import check_agents
from agentd.providers.embedders import check_embedder

ROOT = Path(__file__).parent.parent
AGENT_SCHEMA = json.loads((ROOT / "docs" / "agent.schema.json").read_text())
DAEMON_SCHEMA = json.loads((ROOT / "docs" / "agentd.schema.json").read_text())
MINIMAL_AGENT = "purpose: You answer.\n"


def _repository_agents() -> list[tuple[str, str, bool]]:
    files = sorted([*ROOT.glob("agents/*.yaml"), *ROOT.glob("examples/agents/*.yaml")])
    assert len(files) >= 3
    return [(str(f.relative_to(ROOT)), f.read_text(), True) for f in files]


def _init_files(tmp: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in init_folder(tmp)}


def _readme_agent() -> str:
    blocks = re.findall(r"^```yaml\n(.*?)^```", (ROOT / "README.md").read_text(), flags=re.M | re.S)
    [agent] = [b for b in blocks if b.startswith("# agents/assistant.yaml")]
    return agent


AGENTS: list[tuple[str, str, bool]] = [
    ("shorthand provider/model", "purpose: p\nmodel: openai/gpt-4.1-mini\n", True),
    ("shorthand offline", "purpose: p\nmodel: offline\n", True),
    ("shorthand from the environment", "purpose: p\nmodel: ${AGENTD_MODEL:-ollama/llama3.2}\n", True),
    ("model mapping", "model: {name: anthropic/claude-sonnet-4-5, small: ollama/llama3.2}\n", True),
    (
        "stdio server",
        "tools: {mcp: {files: {command: [python, -m, s], env: {A: b}}}, allow: [files.*]}\n",
        True,
    ),
    ("http server", "tools: {mcp: {web-search: {url: 'http://127.0.0.1:9/mcp', headers: {A: b}}}}\n", True),
    (
        "server with empty env beside url",
        "tools: {mcp: {s: {url: 'https://x/mcp', env: {}, cwd: null}}}\n",
        True,
    ),
    (
        "single underscores",
        "tools: {mcp: {my_files: {command: [x]}}, deny: [my_files.rm], ask: [memory.forget]}\n",
        True,
    ),
    ("approvers", "tools: {approvers: ['slack:U777', 'discord:123']}\n", True),
    ("window strategy", "memory: {scope: thread, strategy: {kind: window, messages: 5}}\n", True),
    ("compaction off", "memory: {compact_at_tokens: false}\n", True),
    ("webhook with nothing after it", "channels:\n  webhook:\n", True),
    ("discord", "channels: {discord: {token: abc}}\n", True),
    ("media block", "media: {max_bytes: 1000000, allowed: [image, audio], keep_days: 30}\n", True),
    (
        "media models",
        "media: {image_model: openai/gpt-4o-mini, transcribe: openai/whisper-1, echo_transcript: true}\n",
        True,
    ),
    (
        "media types and urls",
        "media: {allowed_types: [image/png, 'image/*'], allowed_urls: ['https://cdn.example/']}\n",
        True,
    ),
    ("model input", "model: {name: ollama/llava, input: [text, image]}\n", True),
    (
        "composite strategy",
        "memory: {strategy: {kind: composite, layers: [{kind: window}, {kind: episodic}]}}\n",
        True,
    ),
    ("empty file", "", False),
    ("all comments", "# nothing yet\n", False),
    ("a mapping of nothing", "{}\n", False),
    ("not a mapping", "- purpose\n", False),
    ("name key", "name: x\npurpose: p\n", False),
    ("unknown key", "purpos: p\n", False),
    ("media max_bytes zero", "media: {max_bytes: 0}\n", False),
    ("media unknown kind", "media: {allowed: [video]}\n", False),
    ("media unknown key", "media: {max_size: 10}\n", False),
    ("media type not a MIME type", "media: {allowed_types: [png]}\n", False),
    ("media images_in_context negative", "media: {images_in_context: -1}\n", False),
    ("media image_model without provider", "media: {image_model: gpt-4o}\n", False),
    ("model input unknown", "model: {name: openai/gpt-4o, input: [text, video]}\n", False),
    ("model without provider", "model: gpt-4\n", False),
    ("model with a blank inside", "model: {name: 'openai/gpt 4'}\n", False),
    ("allow without a dot", "tools: {mcp: {files: {command: [x]}}, allow: [files]}\n", False),
    ("deny with a blank", "tools: {mcp: {files: {command: [x]}}, deny: [files.read file]}\n", False),
    ("ask without a source", "tools: {ask: [.read_file]}\n", False),
    ("server name with __", "tools: {mcp: {my__files: {command: [x]}}}\n", False),
    ("server name too long", f"tools: {{mcp: {{{'s' * 33}: {{command: [x]}}}}}}\n", False),
    ("server named memory", "tools: {mcp: {memory: {command: [x]}}}\n", False),
    ("server with command and url", "tools: {mcp: {s: {command: [x], url: 'http://h/mcp'}}}\n", False),
    ("server with neither", "tools: {mcp: {s: {timeout_s: 5}}}\n", False),
    ("server with an empty command", "tools: {mcp: {s: {command: []}}}\n", False),
    ("url server with env", "tools: {mcp: {s: {url: 'http://h/mcp', env: {A: b}}}}\n", False),
    ("url server with cwd", "tools: {mcp: {s: {url: 'http://h/mcp', cwd: /srv}}}\n", False),
    ("command server with headers", "tools: {mcp: {s: {command: [x], headers: {A: b}}}}\n", False),
    ("ftp url", "tools: {mcp: {s: {url: 'ftp://h/mcp'}}}\n", False),
    ("approver without channel", "tools: {approvers: [U777]}\n", False),
    ("compaction at zero", "memory: {compact_at_tokens: 0}\n", False),
    ("subagent name", "subagents: [{agent: Researcher}]\n", False),
    ("no tool steps", "max_tool_steps: 0\n", False),
    ("unknown strategy", "memory: {strategy: {kind: windowed}}\n", False),
    (
        "composite in composite",
        "memory: {strategy: {kind: composite, layers: [{kind: composite, layers: []}]}}\n",
        False,
    ),
    (
        "state field name",
        "memory: {strategy: {kind: state, spec: s, fields: [{name: 1a, description: d}]}}\n",
        False,
    ),
    ("discord with nothing after it", "channels:\n  discord:\n", False),
    ("temperature out of range", "model: {name: offline, temperature: 3}\n", False),
]

DAEMONS: list[tuple[str, str, bool]] = [
    ("empty file", "", True),
    ("all comments", "# every default\n", True),
    ("port", "http: {port: 9000}\n", True),
    ("beyond loopback with a token", "http: {host: 0.0.0.0, token: s3cret}\n", True),
    ("another loopback address", "http: {host: 127.0.0.2}\n", True),
    ("named provider", "providers: {groq.eu: {kind: openai, base_url: 'https://h/v1'}}\n", True),
    ("defaults", "defaults: {model: offline}\nmemory_extractor_model: openai/gpt-4.1-mini\n", True),
    ("postgres", "store: {url: 'postgresql://u:p@h:5432/d', lease_s: 15}\n", True),
    ("empty store url", "store: {url: ''}\n", True),
    ("beyond loopback without a token", "http: {host: 0.0.0.0}\n", False),
    ("beyond loopback with an empty token", "http: {host: example.com, token: ''}\n", False),
    ("provider name with a blank", "providers: {'my groq': {kind: openai}}\n", False),
    ("provider kind", "providers: {x: {kind: mistral}}\n", False),
    ("mysql", "store: {url: 'mysql://h/d'}\n", False),
    ("default model without provider", "defaults: {model: gpt-4}\n", False),
    ("unknown key", "htp: {port: 1}\n", False),
    ("port out of range", "http: {port: 70000}\n", False),
    ("not a mapping", "[http]\n", False),
]

# Valid by the schema, refused by `agentd check`: what agentd.yaml, the environment or the rest of the
# file decides.
LOADER_ONLY: list[tuple[str, str, str]] = [
    ("agent", "undeclared provider", "model: mistral/large\n"),
    ("agent", "pattern naming no server", "tools: {allow: [nothere.read]}\n"),
    ("agent", "allow on a built-in source", "tools: {allow: [memory.recall]}\n"),
    ("agent", "unset variable", "purpose: ${AGENTD_SCHEMA_TEST_UNSET}\n"),
    ("agent", "a sub-agent not in the folder", "subagents: [{agent: researcher-2}]\n"),
    (
        "agent",
        "state fields named twice",
        "memory: {strategy: {kind: state, spec: s, fields: [{name: a, description: d}, {name: a, description: e}]}}\n",
    ),
    ("daemon", "embedder of an undeclared provider", "embedder: nowhere/model\n"),
]


@pytest.fixture(autouse=True)
def _no_agentd_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("AGENTD_MODEL", "AGENTD_TOKEN", "AGENTD_STORE_URL", "AGENTD_SCHEMA_TEST_UNSET"):
        monkeypatch.delenv(var, raising=False)


def schema_valid(schema: dict[str, object], text: str) -> bool:
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    return validator.is_valid(yaml.safe_load(text))


def check_valid(tmp: Path, which: str, text: str) -> bool:
    """What `agentd check` says of the file: an agent in agents/, or agentd.yaml beside a valid agent."""
    (tmp / "agents").mkdir(parents=True, exist_ok=True)
    agent, daemon = (text, None) if which == "agent" else (MINIMAL_AGENT, text)
    (tmp / "agents" / "case.yaml").write_text(agent)
    if daemon is not None:
        (tmp / "agentd.yaml").write_text(daemon)
    result = check_agents(tmp / "agents", check_embedder=check_embedder)
    return not result.errors


def test_the_schemas_are_valid_json_schemas() -> None:
    assert jsonschema.validators.validator_for(AGENT_SCHEMA, default=None) is jsonschema.Draft202012Validator
    assert jsonschema.validators.validator_for(DAEMON_SCHEMA, default=None) is jsonschema.Draft202012Validator
    jsonschema.Draft202012Validator.check_schema(AGENT_SCHEMA)
    jsonschema.Draft202012Validator.check_schema(DAEMON_SCHEMA)


def table(tmp: Path) -> list[tuple[str, str, str, bool]]:
    init = _init_files(tmp / "init")
    return [
        *[("agent", name, text, ok) for name, text, ok in [*AGENTS, *_repository_agents()]],
        ("agent", "agentd init's assistant.yaml", init["assistant.yaml"], True),
        ("agent", "the README's agent", _readme_agent(), True),
        *[("daemon", name, text, ok) for name, text, ok in DAEMONS],
        ("daemon", "agentd init's agentd.yaml", init["agentd.yaml"], True),
    ]


def test_schema_valid_is_check_valid(tmp_path: Path) -> None:
    disagreements = []
    for i, (which, name, text, expected) in enumerate(table(tmp_path)):
        by_schema = schema_valid(AGENT_SCHEMA if which == "agent" else DAEMON_SCHEMA, text)
        by_check = check_valid(tmp_path / str(i), which, text)
        if not by_schema == by_check == expected:
            disagreements.append(
                f"{which} {name!r}: schema {by_schema}, check {by_check}, expected {expected}"
            )
    assert disagreements == []


@pytest.mark.parametrize(("which", "name", "text"), LOADER_ONLY, ids=[n for _, n, _ in LOADER_ONLY])
def test_what_only_the_loader_knows(tmp_path: Path, which: str, name: str, text: str) -> None:
    assert schema_valid(AGENT_SCHEMA if which == "agent" else DAEMON_SCHEMA, text)
    assert not check_valid(tmp_path, which, text)


def test_check_jsonschema_agrees(tmp_path: Path) -> None:
    """The command an editor's pre-commit hook runs, on the same table as files (its own YAML reader and
    its default, ECMA-flavoured regular expressions)."""
    rows = table(tmp_path)
    files: dict[str, list[tuple[Path, bool]]] = {"agent": [], "daemon": []}
    for i, (which, _name, text, expected) in enumerate(rows):
        path = tmp_path / "cj" / which / f"case{i}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        files[which].append((path, expected))
    for which, schema in (("agent", "agent.schema.json"), ("daemon", "agentd.schema.json")):
        paths = files[which]
        out = subprocess.run(
            [
                str(Path(sys.executable).parent / "check-jsonschema"),
                "--schemafile",
                str(ROOT / "docs" / schema),
                "--output-format",
                "json",
                *[str(p) for p, _ in paths],
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        report = json.loads(out.stdout)
        refused = {Path(e["filename"]).name for e in report["errors"]} | {
            Path(e["filename"]).name for e in report.get("parse_errors", [])
        }
        wrong = [f"{p.name}: expected {ok}" for p, ok in paths if (p.name not in refused) != ok]
        assert wrong == [], "\n".join(f"{w} ({rows[int(w.split('.')[0][4:])][1]})" for w in wrong)
