"""litellm against the OpenAI-compatible endpoint (issue 22): the portable way to name a conversation.

litellm sends `user` only for the models it knows, so a conversation named by `user` is lost through
it; the `X-Agentd-Conversation` header (its `extra_headers`) reaches agentd whatever the model, as the
README says. litellm's model-cost map is read from its package, not fetched (no network in tests).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentd.daemon.daemon import Daemon
from testkit.fake_llm import FakeLLM
from tests.support import daemon_on_loopback, every_message

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
litellm = pytest.importorskip("litellm")

# litellm's own types (pydantic on its TypedDicts) warn when first built; not agentd's to mend
pytestmark = pytest.mark.filterwarnings("ignore:.* using the `ReadOnly` qualifier:UserWarning")

ASSISTANT = "purpose: You help.\nmodel: fake/m\nmemory: {scope: thread}\nchannels: {webhook: {}}\n"
TOKEN = "s3cret"


@pytest.fixture
async def served(tmp_path: Path, fake: FakeLLM) -> AsyncIterator[tuple[Daemon, str]]:
    settings = (
        f"providers: {{fake: {{kind: openai, base_url: '{fake.openai_base_url}', api_key: k, max_retries: 0}}}}\n"
        f"http: {{token: {TOKEN}}}\n"
    )
    async with daemon_on_loopback(tmp_path, {"assistant": ASSISTANT}, settings) as served:
        yield served


async def ask(url: str, text: str, **more: Any) -> Any:
    return await litellm.acompletion(
        model="openai/assistant",
        api_base=f"{url}/v1",
        api_key=TOKEN,
        messages=[{"role": "user", "content": text}],
        extra_headers={"X-Agentd-Conversation": "lite-ana"},
        num_retries=0,
        **more,
    )


async def test_litellm_keeps_one_conversation_by_the_header_and_reads_the_usage(
    served: tuple[Daemon, str], fake: FakeLLM
) -> None:
    daemon, url = served
    fake.reply("Hi Ana.", usage=(9, 2))
    fake.reply("You said hi.", pieces=["You ", "said hi."], usage=(20, 3))
    first = await ask(url, "Hi, I am Ana.")
    assert first.choices[0].message.content == "Hi Ana."
    assert (first.usage.prompt_tokens, first.usage.completion_tokens) == (9, 2)
    stream = await ask(url, "What did I say?", stream=True)
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == "You said hi."
    # the second call's model saw the first exchange: one conversation, named by the header
    sent = [m["content"] for m in fake.requests[-1].json["messages"] if m["role"] != "system"]
    assert sent == ["Hi, I am Ana.", "Hi Ana.", "What did I say?"]
    agent = daemon.agent("assistant")
    assert agent is not None
    assert [m["role"] for m in await every_message(agent)] == ["user", "assistant", "user", "assistant"]
    assert {r["conversation_key"] for r in await agent.runs()} == {"openai:lite-ana"}
