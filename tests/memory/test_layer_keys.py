"""Every key a memory strategy stores in its layer state is declared in its LAYER_KEYS, with what a
person's erasure does to it: a key missing there would keep their words after their erasure."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentd.engine.agent import Agent
from agentd.memory.base import Memory
from agentd.memory.erasure import Erasure, declared_keys, layer_erasure
from agentd.memory.registry import STRATEGY_KINDS
from agentd.messages import Message
from agentd.providers.base import Completion, CompletionRequest, Usage
from agentd.providers.embedders import HashEmbedder
from agentd.store.queries import LayerStateOf
from tests.support import Harness, say

KEY = "webhook:c1"
STATE = {
    "kind": "state",
    "spec": "What they work on.",
    "fields": [{"name": "goal", "description": "what they want"}],
    "model": "mem/m",
}
# a strategy block per registered kind, each set up so that it does its work within a few turns
STRATEGIES: dict[str, dict[str, Any]] = {
    "none": {"kind": "none"},
    "full": {"kind": "full"},
    "window": {"kind": "window", "messages": 2},
    "summarized": {"kind": "summarized", "every": 2, "model": "mem/m"},
    "episodic": {"kind": "episodic"},
    "semantic": {"kind": "semantic", "model": "mem/m"},
    "state": STATE,
    "composite": {
        "kind": "composite",
        "layers": [
            {"kind": "window", "messages": 4},
            {"kind": "summarized", "every": 2, "model": "mem/m"},
            {"kind": "episodic"},
            {"kind": "semantic", "model": "mem/m"},
            STATE,
        ],
    },
}
ANSWERS = {  # what the memory model answers, by what it is asked for
    "fold": json.dumps({"goal": "ship the release"}),
    "summary": "They are shipping the release.",
    "extraction": json.dumps(
        {"facts": [{"key": "project", "value": "release", "confidence": 0.9, "source": "said so"}]}
    ),
}


class MemoryModel:
    """Answers each memory call the way its strategy wants to be answered, so every one of them runs."""

    async def complete(self, request: CompletionRequest) -> Completion:
        text = ANSWERS.get(request.purpose or "", f"reply to {request.messages[-1].text}")
        return Completion(Message.assistant(text), Usage(10, 5), "stop")


def layers(memory: Memory) -> list[Memory]:
    nested = getattr(memory.strategy, "layers", None)
    return [leaf for layer in nested for leaf in layers(layer)] if nested else [memory]


async def stored_keys(agent: Agent) -> dict[str, set[str]]:
    """What each of the agent's layers stored in its layer state for the conversation, by kind."""
    thread = await agent.state.threads.get(KEY)
    found: dict[str, set[str]] = {}
    for layer in layers(agent.state.memory_of(agent.spec, KEY)):
        found.setdefault(layer.kind, set())
        if thread.id is not None:  # none of it when the strategy keeps no thread at all (`none`)
            state = await agent.state.store.read(LayerStateOf(thread.id, layer.strategy.layer))
            found[layer.kind].update(state.data)
    return found


def test_every_registered_kind_is_driven_here() -> None:
    assert set(STRATEGIES) == set(STRATEGY_KINDS)


@pytest.mark.parametrize("kind", sorted(STRATEGY_KINDS))
async def test_every_key_a_strategy_stores_is_declared_with_what_an_erasure_does(
    harness: Harness, kind: str
) -> None:
    spec = f"purpose: P\nmodel: mem/m\nmemory: {json.dumps({'strategy': STRATEGIES[kind]})}\n"
    agent = await harness.agent(spec, providers={"mem": MemoryModel()}, embedder=HashEmbedder(64))
    for text in ("we ship the release friday", "the tests are green", "tag it now"):
        await say(agent, KEY)(text)
        assert await agent.drain(5)
    for layer_kind, keys in (await stored_keys(agent)).items():
        declared = declared_keys(layer_kind)
        assert keys == set(declared), f"{layer_kind} stores {sorted(keys)}, declares {sorted(declared)}"
        assert all(isinstance(what, Erasure) for what in declared.values())


def test_the_erasure_collects_every_declared_key_by_what_it_does() -> None:
    collected = layer_erasure()
    assert collected.rebuild == ("sigma", "summary")
    assert collected.drop == ("last_recall",)
