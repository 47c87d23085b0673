import socket
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from agentd.testing.fake_llm import FakeLLM


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    # trust_env=False: a proxy in the environment must not swallow loopback calls.
    async with httpx.AsyncClient(trust_env=False) as c:
        yield c


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
