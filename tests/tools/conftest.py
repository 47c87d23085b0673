"""Fixtures of the tool tests (the fake model server and the HTTP client are tests/conftest.py's)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """The MCP server's folder, with one note in it."""
    folder = tmp_path / "files"
    folder.mkdir()
    (folder / "notes.txt").write_text("buy milk", encoding="utf-8")
    return folder
