"""A daemon that was not the last to serve a conversation catches up inside its claim (issue 12).

Its cached copy of the thread misses the turns other daemons took since; the claim is told where the
copy stands and, when the rest is short, brings it, so no read of its own is made. Reads are counted
on the server: the test database logs every statement its sessions send (`log_statement`), so a
catch-up read (ThreadHeader + MessagesPage) shows in the server's log; the claim's own reads run
inside agentd_claim and are not logged.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentd.store.postgres.claims import TAIL_CAP
from agentd.store.queries import ActiveThread
from testkit.postgres import PostgresServer
from tests.support import Harness
from tests.test_postgres_daemons import KEY, say, texts
from tests.test_postgres_daemons import daemon as serving
from tests.test_store_contract import turn

MESSAGE_READS = "FROM messages"  # in every statement that reads messages (a header's max(seq), a page)


class StatementLog:
    """What the test database's sessions send, from the server's log (every statement, logged)."""

    def __init__(self, server: PostgresServer, database: str):
        self._server = server
        server.psql(f"ALTER DATABASE \"{database}\" SET log_statement = 'all'")  # (sessions opened after)
        self._offset = server.log_path.stat().st_size

    def since_last(self) -> list[str]:
        """The statements logged since the last call."""
        with self._server.log_path.open("rb") as log:
            log.seek(self._offset)
            text = log.read().decode(errors="replace")
        self._offset += len(text.encode())
        return [line for line in text.splitlines() if "LOG:  execute" in line or "LOG:  statement" in line]

    def message_reads(self) -> list[str]:
        return [line for line in self.since_last() if MESSAGE_READS in line]


@pytest.fixture
async def logged(postgres_server: PostgresServer, postgres_url: str) -> StatementLog:
    return StatementLog(postgres_server, postgres_url.rsplit("/", 1)[1])


@pytest.fixture
async def shared(tmp_path: Path, postgres_url: str, logged: StatementLog) -> AsyncIterator[Harness]:
    h = Harness(tmp_path / "data", store_url=postgres_url)
    yield h
    await h.close()


async def test_daemons_taking_turns_catch_up_without_a_read_of_their_own(
    shared: Harness, logged: StatementLog
) -> None:
    (a, model_a), (b, model_b) = await serving(shared), await serving(shared)
    await say(a, "one")
    await say(b, "two")  # b loads the thread (it had no copy): that is a read
    assert logged.message_reads(), "the statement log shows no reads: the count below would prove nothing"
    for i, text in enumerate(["three", "four", "five", "six", "seven", "eight"]):
        await say(a if i % 2 == 0 else b, text)  # each copy is one turn behind when its daemon claims
    assert logged.message_reads() == []
    said = ["one", "two", "three", "four", "five", "six", "seven", "eight"]
    every = [m for text in said for m in (text, f"default reply to: {text}")]
    assert texts(model_b.requests[-1]) == every[:-1]
    assert texts(model_a.requests[-1]) == every[:-3]
    thread = await a.state.store.read(ActiveThread(KEY))
    assert [m.message.text for m in thread.messages] == every


async def test_a_copy_further_behind_than_the_cap_reads_what_it_misses(
    shared: Harness, logged: StatementLog
) -> None:
    (a, model_a), (b, _) = await serving(shared), await serving(shared)
    await say(a, "one")
    many = [f"m{i}" for i in range(TAIL_CAP + 2)]
    store = b.state.store
    async with store.claim(KEY) as claim:
        assert claim.thread is not None
        await store.write(turn(claim.thread.thread_id, claim.thread.next_seq, *many))
    logged.since_last()
    await say(a, "after")
    assert len(logged.message_reads()) >= 1  # the fallback: read as before the claim brought tails
    assert texts(model_a.requests[-1]) == ["one", "default reply to: one", *many, "after"]


async def test_a_reset_thread_is_reloaded_not_appended_to(shared: Harness) -> None:
    """/reset keeps the thread's id but moves its version: the tail after a's copy (same id, its next
    seq ahead again) belongs to a new transcript, and a's old messages must not stay."""
    (a, model_a), (b, _) = await serving(shared), await serving(shared)
    await say(a, "old")
    await say(b, "/reset")
    for text in ("x", "y"):
        await say(b, text)
    await say(a, "z")
    assert texts(model_a.requests[-1]) == ["x", "default reply to: x", "y", "default reply to: y", "z"]


async def test_a_compacted_thread_is_reloaded(shared: Harness) -> None:
    (a, model_a), (b, _) = await serving(shared), await serving(shared)
    await say(a, "one")
    for text in ("two", "three"):
        await say(b, text)
    assert (await say(b, "/compact")).text.startswith("Compacted 2 older messages")  # "one" and its reply
    await say(b, "four")
    await say(a, "five")
    assert "one" not in texts(model_a.requests[-1])
    assert texts(model_a.requests[-1])[-7:] == [
        *("two", "default reply to: two", "three", "default reply to: three"),
        *("four", "default reply to: four", "five"),
    ]
