"""Shared fixtures: every test gets its own data folder; PostgreSQL tests get their own database."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import discord
import httpx
import pytest

from testkit.fake_discord import FakeDiscord
from testkit.fake_llm import FakeLLM
from testkit.postgres import PostgresServer
from tests.support import Harness

STORE_BACKENDS = ("sqlite", "postgres")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test marked `both_stores` (or in a module marked so) runs once per store backend."""
    if "store_backend" in metafunc.fixturenames and metafunc.definition.get_closest_marker("both_stores"):
        metafunc.parametrize("store_backend", STORE_BACKENDS)


@pytest.fixture
def store_backend() -> str:
    """Where the harness builds agents: SQLite files, unless the test runs on both (see above)."""
    return "sqlite"


@pytest.fixture
async def harness(
    tmp_path: Path, store_backend: str, request: pytest.FixtureRequest
) -> AsyncIterator[Harness]:
    url = request.getfixturevalue("postgres_url") if store_backend == "postgres" else None
    h = Harness(tmp_path / "data", store_url=url)
    yield h
    await h.close()


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    """A fake OpenAI/Anthropic server on loopback (channel tests name their own platform fakes so)."""
    with FakeLLM() as server:
        yield server


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    # trust_env=False: a proxy in the environment must not swallow loopback calls.
    async with httpx.AsyncClient(trust_env=False) as c:
        yield c


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One throwaway PostgreSQL server for the run, started the first time a test asks for it.

    Sync on purpose: it starts in the main thread, which outlives the server (see testkit.postgres).
    Without the binaries every test that asks errors with the install hint; none is skipped.
    """
    with PostgresServer() as server:
        yield server


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """The URL of a fresh, empty database of the session's server, dropped after the test."""
    name = f"test_{uuid.uuid4().hex[:16]}"
    url = postgres_server.create_database(name)
    yield url
    postgres_server.drop_database(name)


@pytest.fixture
async def discord_fake(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeDiscord]:
    # The channel points discord.py's class-level endpoints at the fake; put them back afterwards.
    monkeypatch.setattr(discord.http.Route, "BASE", discord.http.Route.BASE)
    gateway = discord.gateway.DiscordWebSocket
    monkeypatch.setattr(gateway, "DEFAULT_GATEWAY", gateway.DEFAULT_GATEWAY)
    server = FakeDiscord(heartbeat_ms=200)
    await server.start()
    yield server
    await server.stop()
