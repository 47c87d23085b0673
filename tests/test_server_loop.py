"""`agentd run` serves HTTP on httptools and uvloop (uvicorn[standard]'s parts, dependencies of agentd),
and on uvicorn's pure-Python defaults when they are missing."""

from __future__ import annotations

import asyncio
import sys

import pytest
import uvloop
from uvicorn.protocols.http.auto import AutoHTTPProtocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from agentd.daemon.server import event_loop_factory


def test_uvicorn_parses_http_with_httptools() -> None:
    assert AutoHTTPProtocol is HttpToolsProtocol


def test_the_daemon_runs_on_uvloop_when_it_is_installed() -> None:
    factory = event_loop_factory()
    assert factory is uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        assert isinstance(runner.get_loop(), uvloop.Loop)


def test_without_uvloop_the_daemon_runs_on_asyncios_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # an import of None fails: as if not installed
    assert event_loop_factory() is None
