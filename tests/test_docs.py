"""Docs that cannot drift: the committed schemas are what the code says, the README's commands are CI's."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentd.cli import schema_text

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
