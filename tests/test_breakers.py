"""A memory model that is failing or slow never slows the chat (issue 10): breakers and work beside turns."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx

from agentd.config.models import DaemonSpec
from agentd.daemon import Daemon
from agentd.daemon.resources import Resources
from agentd.engine.breakers import Breakers
from agentd.errors import ModelPaused, ProviderError
from agentd.events import InboundEvent
from agentd.http.app import create_app
from agentd.messages import Message
from agentd.providers.base import Completion, CompletionRequest, Usage
from testkit.fake_llm import FakeLLM
from testkit.scripted import ScriptedProvider
from testkit.waiting import wait_until
from tests.support import make_spec

STATE = """\
model: main/m
memory:
  strategy:
    kind: state
    spec: what the person is working on
    fields: [{name: goal, description: the current goal}]
    model: fold/m
"""


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def down(status: int | None = 503) -> ProviderError:
    return ProviderError("HTTP 503", provider="fold", model="m", status=status, retryable=True)


def test_a_failure_pauses_the_model_doubling_and_a_success_closes_it() -> None:
    clock = Clock()
    breakers = Breakers(first_pause_s=1.0, clock=clock)
    breakers.check("fold/m")  # never failed: closed
    breakers.failed("fold/m", down())
    try:
        breakers.check("fold/m")
        raise AssertionError("the breaker should be open")
    except ModelPaused as paused:
        assert paused.model == "fold/m" and 0.9 < paused.retry_in <= 1.0
    clock.now += 1.01
    breakers.check("fold/m")  # the probe may go
    breakers.failed("fold/m", down())
    assert breakers.describe()["fold/m"] == {
        "state": "open",
        "failures": 2,
        "retry_in_s": 2.0,
        "last_error": "provider fold (model m): HTTP 503",
    }
    breakers.succeeded("fold/m")
    assert breakers.describe() == {}


def test_a_request_the_provider_refused_does_not_pause_the_model() -> None:
    breakers = Breakers(first_pause_s=1.0, clock=Clock())
    breakers.failed("fold/m", down(status=400))  # the request's fault: retrying the model is fine
    breakers.check("fold/m")
    assert breakers.describe() == {}


class GatedFold:
    """A fold model that answers only when the test opens its gate: a model as slow as we like."""

    name = "fold"

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.started = 0

    async def complete(self, request: CompletionRequest) -> Completion:
        self.started += 1
        await self.gate.wait()
        return Completion(Message.assistant('{"goal": "ship it"}'), Usage(5, 5))


async def test_a_slow_fold_model_never_holds_up_the_next_turn(tmp_path: Path) -> None:
    main, fold = ScriptedProvider("main"), GatedFold()
    async with Resources(DaemonSpec(), tmp_path, providers={"main": main, "fold": fold}) as resources:
        agent = await resources.open_agent(make_spec(STATE))
        say = agent.handle
        await say(InboundEvent("bot", "webhook:c", "q1", "webhook", user_id="u"))
        await wait_until(lambda: fold.started == 1, "the fold of turn 1 to start")
        # the fold of turn 1 is still waiting on its model: turn 2 is answered all the same
        reply = await asyncio.wait_for(say(InboundEvent("bot", "webhook:c", "q2", "webhook", user_id="u")), 5)
        assert reply.error is None and fold.started == 1
        assert "message(s) not folded into Σ yet" in main.requests[-1].system  # the contract meanwhile
        fold.gate.set()
        assert await agent.drain(5)
        inspected = await agent.inspect("webhook:c")
        assert inspected["layers"][0]["sigma"] == {"goal": "ship it"}
        assert inspected["layers"][0]["not_folded"] == []  # the second fold took in turn 2
        await agent.close()


async def test_a_failing_fold_model_is_paused_and_folds_the_queue_once_it_is_back(tmp_path: Path) -> None:
    with FakeLLM() as fake:
        settings = DaemonSpec.model_validate(
            {
                "providers": {
                    "fold": {
                        "kind": "openai",
                        "base_url": fake.openai_base_url,
                        "api_key": "k",
                        "max_retries": 0,
                    }
                }
            }
        )
        main = ScriptedProvider("main")
        breakers = Breakers(first_pause_s=0.3)
        async with Resources(settings, tmp_path, providers={"main": main}, breakers=breakers) as resources:
            agent = await resources.open_agent(make_spec(STATE))

            async def say(text: str) -> Any:
                return await agent.handle(InboundEvent("bot", "webhook:c", text, "webhook", user_id="u"))

            fake.fail(500)
            await say("q1")
            await wait_until(lambda: "fold/m" in breakers.describe(), "the breaker to open")
            fold_calls = len(fake.requests)
            for i in range(3):  # while paused: turns go on, no fold request is made
                assert (await say(f"again {i}")).error is None
            assert len(fake.requests) == fold_calls
            status = (await say("/status")).text
            assert "Memory model fold/m: paused after 1 failure" in status
            # the pause ends: the work is retried in the background and takes in the whole queue
            fake.reply('{"goal": "answer everything"}')
            await wait_until(lambda: breakers.describe() == {}, "the fold model to be back", timeout=5)
            assert await agent.drain(5)
            layer = (await agent.inspect("webhook:c"))["layers"][0]
            assert layer["sigma"] == {"goal": "answer everything"}
            folded = str(fake.requests[-1].json["messages"])
            assert all(t in folded for t in ("q1", "again 0", "again 2"))
            await agent.close()


async def test_get_agents_shows_the_memory_models_breakers(tmp_path: Path) -> None:
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "bot.yaml").write_text(STATE + "channels: {webhook: {}}\n")
    fold = ScriptedProvider("fold").fail("HTTP 503", status=503)
    breakers = Breakers(first_pause_s=30)
    daemon = Daemon(
        tmp_path / "agents",
        tmp_path / "data",
        reload_interval=60,
        providers={"main": ScriptedProvider("main"), "fold": fold},
        breakers=breakers,
    )
    async with daemon:
        transport = httpx.ASGITransport(app=create_app(daemon))
        async with httpx.AsyncClient(transport=transport, base_url="http://agentd") as client:
            sent = await client.post("/agents/bot/messages", json={"conversation_id": "c", "text": "hi"})
            assert sent.status_code == 200
            await wait_until(lambda: "fold/m" in breakers.describe(), "the breaker to open")
            shown = (await client.get("/agents")).json()["memory_models"]["fold/m"]
            assert shown["state"] == "open" and shown["failures"] == 1 and "HTTP 503" in shown["last_error"]
