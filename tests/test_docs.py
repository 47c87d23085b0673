"""Docs that cannot drift: the committed schemas are what the code says, the README's commands are CI's."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from agentd.cli import main, schema_text
from agentd.config.loader import parse_agent
from agentd.config.refs import BUILTIN_PROVIDERS

ROOT = Path(__file__).parent.parent


@pytest.mark.parametrize(
    ("which", "file"), [("agent", "agent.schema.json"), ("daemon", "agentd.schema.json")]
)
def test_committed_schema_is_current(which: str, file: str) -> None:
    committed = (ROOT / "docs" / file).read_text()
    assert committed == schema_text(which), f"run: agentd schema {which} > docs/{file}"


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    command = "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/pytest"
    assert command in readme and command in ci


def readme_sessions(readme: str) -> list[list[str]]:
    """The README's fenced blocks that show an `agentd` command with its output (lines starting `$ `)."""
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", readme, flags=re.MULTILINE | re.DOTALL)
    return [block.splitlines() for block in blocks if re.search(r"^\$ agentd ", block, flags=re.MULTILINE)]


def replay(lines: list[str], capsys: pytest.CaptureFixture[str]) -> list[str]:
    """Run a README session in the current folder: `$ cat FILE` writes the lines after it to FILE,
    `$ agentd ...` runs the CLI; returns what the session shows, with the CLI's real output."""
    shown: list[str] = []
    commands = [i for i, line in enumerate(lines) if line.startswith("$ ")]
    for start, end in zip(commands, [*commands[1:], len(lines)], strict=True):
        command, body = shlex.split(lines[start][2:]), lines[start + 1 : end]
        shown.append(lines[start])
        if command[0] == "cat":
            Path(command[1]).parent.mkdir(parents=True, exist_ok=True)
            Path(command[1]).write_text("".join(f"{line}\n" for line in body))
            shown += body
        else:
            assert command[0] == "agentd", f"the README runs only cat and agentd: {lines[start]}"
            main(command[1:])
            out = capsys.readouterr()
            shown += (out.out + out.err).splitlines()
    return shown


def test_the_readme_check_example_is_what_check_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sessions = readme_sessions((ROOT / "README.md").read_text())
    assert any(line.startswith("$ agentd check") for lines in sessions for line in lines)
    monkeypatch.chdir(tmp_path)
    for lines in sessions:
        assert replay(lines, capsys) == lines


def test_the_readme_agent_file_is_valid() -> None:
    blocks = re.findall(
        r"^```yaml\n(.*?)^```", (ROOT / "README.md").read_text(), flags=re.MULTILINE | re.DOTALL
    )
    [agent] = [block for block in blocks if block.startswith("# agents/assistant.yaml")]
    spec = parse_agent(Path("agents/assistant.yaml"), text=agent, env={}, providers=BUILTIN_PROVIDERS)
    assert spec.model.small == "ollama/llama3.2" and spec.channels.enabled() == ["webhook"]


def test_every_readme_memory_example_is_a_valid_agent_memory() -> None:
    """The strategy examples (composite, and state: once missing, issue 17 item 24) parse as agent files."""
    blocks = re.findall(
        r"^```yaml\n(.*?)^```", (ROOT / "README.md").read_text(), flags=re.MULTILINE | re.DOTALL
    )
    examples = [block for block in blocks if block.startswith("memory:\n  strategy:")]
    kinds = set()
    for block in examples:
        spec = parse_agent(
            Path("agents/x.yaml"), text=f"purpose: p\n{block}", env={}, providers=BUILTIN_PROVIDERS
        )
        assert spec.memory.strategy is not None
        kinds.add(spec.memory.strategy.kind)
    assert {"composite", "state"} <= kinds


def test_the_readme_says_what_a_new_user_needs_first() -> None:
    """Run it: the Python agentd needs (pyproject's) and how to pick a port; Test it: Chromium."""
    readme = (ROOT / "README.md").read_text()
    run_it = readme.split("## Run it", 1)[1].split("\n## ", 1)[0]
    wanted = re.search(r'requires-python = ">=(\d+\.\d+)"', (ROOT / "pyproject.toml").read_text())
    assert wanted is not None and f"Python {wanted.group(1)} or newer" in run_it
    assert "--port" in run_it
    test_it = readme.split("## Test it", 1)[1].split("\n## ", 1)[0]
    assert "chromium" in test_it and "chromium-driver" in test_it


def test_no_file_points_at_a_path_of_one_machine() -> None:
    """The repository is cloned anywhere: docs point at `../shared/...`, never at the folders of the
    machine they were written on."""
    needle = "/" + "work/"  # (spelt so that this file does not name it)
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    assert tracked
    offenders = []
    for name in tracked:
        path = ROOT / name
        if path.is_file() and path.suffix in (".md", ".py", ".toml", ".yaml", ".yml", ".txt", ""):
            text = path.read_text(errors="replace")
            offenders += [f"{name}:{n}" for n, line in enumerate(text.splitlines(), 1) if needle in line]
    assert offenders == []


def bench_scripts() -> list[str]:
    return sorted(p.name for p in (ROOT / "bench").glob("*.py") if not p.name.startswith("_"))


def test_every_bench_script_is_named_in_bench_readme_and_the_readme_layout() -> None:
    """A script added to bench/ is described in bench/README.md's table and listed in the README's Layout."""
    scripts = bench_scripts()
    assert len(scripts) >= 12
    table = re.findall(r"^\| `([a-z_]+\.py)` \|", (ROOT / "bench" / "README.md").read_text(), re.MULTILINE)
    assert sorted(table) == scripts
    readme = (ROOT / "README.md").read_text()
    layout = readme[readme.index("## Layout") :]
    listed = layout[layout.index("\nbench/") : layout.index("\ndeploy/")]
    assert [s for s in scripts if s not in listed] == []


def test_every_bench_script_takes_quick_and_the_smoke_run_runs_them_all() -> None:
    """.ci/bench-smoke runs every bench/*.py with --quick (and .ci/run runs it): each script says --quick."""
    for script in bench_scripts():
        assert '"--quick"' in (ROOT / "bench" / script).read_text(), f"bench/{script} takes no --quick"
    smoke = (ROOT / ".ci" / "bench-smoke").read_text()
    assert "for script in *.py" in smoke and "--quick" in smoke
    assert ".ci/bench-smoke" in (ROOT / ".ci" / "run").read_text()
