"""`model.fallbacks` and `model.small_fallbacks` in the agent file (issue 19): read, and refused with
file:line like every other field."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentd.config.loader import parse_agent
from agentd.errors import ConfigError

PROVIDERS = ["openai", "anthropic", "ollama", "offline"]


def parse(text: str):  # type: ignore[no-untyped-def]
    return parse_agent(Path("bot.yaml"), text=text, env={}, providers=PROVIDERS)


def test_the_chains_are_read_in_order() -> None:
    spec = parse(
        "model:\n  name: anthropic/claude-sonnet-4-5\n  fallbacks: [openai/gpt-4.1-mini, ollama/llama3.2]\n"
        "  small: openai/gpt-4.1-nano\n  small_fallbacks: [anthropic/claude-haiku-4-5]\n"
    )
    assert spec.model.chain == ("anthropic/claude-sonnet-4-5", "openai/gpt-4.1-mini", "ollama/llama3.2")
    assert spec.model.small_chain == ("openai/gpt-4.1-nano", "anthropic/claude-haiku-4-5")
    # no small model: small work uses the main chain, fallbacks included
    assert parse("model:\n  name: openai/a\n  fallbacks: [anthropic/b]\n").model.small_chain == (
        "openai/a",
        "anthropic/b",
    )
    assert parse("model: openai/a\n").model.chain == ("openai/a",)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            "model:\n  name: openai/a\n  fallbacks: [nope/b]\n",
            "bot.yaml:3:15: model.fallbacks.0: unknown provider 'nope' in model 'nope/b'",
        ),
        (
            "model:\n  name: openai/a\n  fallbacks: openai/b\n",
            "bot.yaml:3:14: model.fallbacks: input should be a valid list",
        ),
        (
            "model:\n  name: openai/a\n  small_fallbacks: [openai/b]\n",
            "bot.yaml:2:3: model: small_fallbacks needs model.small",
        ),
        (
            "model:\n  name: openai/a\n  fallbacks: [openai/b, openai/a]\n",
            "bot.yaml:2:3: model: fallbacks: openai/a is named twice in its chain",
        ),
    ],
)
def test_a_wrong_chain_is_refused_with_file_and_line(text: str, said: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse(text)
    assert str(refused.value).startswith(said), str(refused.value)
