"""Issue 19, section 3, across daemons sharing one PostgreSQL: a `/model` switch made on one daemon is
used by the other's next turn in that conversation (its cache of choices is not trusted on a shared
store)."""

from __future__ import annotations

from pathlib import Path

from testkit.fake_llm import FakeLLM
from tests.test_fallbacks import Clock, agent_on
from tests.test_model_command import ALLOWING, paths, say
from tests.test_overflow import settings


async def test_a_model_switched_on_one_daemon_is_used_by_the_others_next_turn(
    tmp_path: Path, postgres_url: str
) -> None:
    with FakeLLM() as fake:
        async with (
            agent_on(tmp_path / "a", settings(fake), Clock(), ALLOWING, store_url=postgres_url) as a,
            agent_on(tmp_path / "b", settings(fake), Clock(), ALLOWING, store_url=postgres_url) as b,
        ):
            fake.reply("From GPT.")
            assert (await say(a, "hi")).text == "From GPT."  # a has read (and kept) the file's model
            assert paths(fake) == ["/v1/chat/completions"]
            switched = await say(b, "/model claude/sonnet")
            assert switched.text == "Model for this conversation: claude/sonnet (was gpt/mini)."
            fake.reply("From Claude.")
            assert (await say(a, "and now")).text == "From Claude."
            assert paths(fake)[-1] == "/v1/messages"  # a's next turn went to the model chosen on b
            runs = [r["model"] for r in await a.runs("webhook:c") if r["trigger"] == "message"]
            assert runs == ["gpt/mini", "claude/sonnet"]
            assert "Model: claude/sonnet" in (await say(a, "/status")).text
            await say(a, "/model default")  # and back, switched on a, holds on b
            fake.reply("GPT again.")
            assert (await say(b, "again")).text == "GPT again."
            assert paths(fake)[-1] == "/v1/chat/completions"
