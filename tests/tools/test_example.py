"""The README's tools walk-through runs: the example MCP server and agent in examples/, and what
`agentd tools` prints for them is what the README shows."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import yaml

from agentd.cli import main

ROOT = Path(__file__).parent.parent.parent


def test_agentd_tools_prints_what_the_readme_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Tools (MCP)", 1)[1]
    [shown] = re.findall(r"^```\n(agent notes\n.*?)^```", section, flags=re.MULTILINE | re.DOTALL)
    # the example names the repository's .venv python; this test runs the server with its own
    agent = yaml.safe_load((ROOT / "examples" / "agents" / "notes.yaml").read_text())
    server = agent["tools"]["mcp"]["notes"]
    assert server["command"] == [".venv/bin/python", "examples/notes_server.py"]
    server["command"] = [sys.executable, str(ROOT / "examples" / "notes_server.py")]
    server["env"] = {"NOTES_DIR": str(tmp_path / "notes")}
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "notes.yaml").write_text(json.dumps(agent))
    monkeypatch.chdir(tmp_path)
    assert main(["tools", "notes", "--agents", "agents", "--data", "data"]) == 0
    assert capsys.readouterr().out == shown
