"""How many tokens a model's context window holds: configured, learned from an overflow, or known.

Compaction runs before a request would exceed the window (agentd.engine.overflow), so agentd must
know it. Three sources, in order: the agent file's `model.context_window`; what the provider's own
overflow error said (remembered for the process: a model whose window nobody configured teaches it
the first time it refuses); and the table below of well-known models. None: unknown, and only the
provider's refusal can say the prompt was too long.
"""

from __future__ import annotations

import re

# Well-known models by the name after the provider (prefixes end in "-": a family). From the
# providers' model pages; a deployment that differs (an Ollama num_ctx, a vLLM --max-model-len) says
# so in model.context_window, or the first overflow teaches it.
KNOWN: dict[str, int] = {
    "gpt-4.1": 1_047_576,
    "gpt-4.1-mini": 1_047_576,
    "gpt-4.1-nano": 1_047_576,
    "gpt-4o": 128_000,
    "gpt-4o-mini": 128_000,
    "gpt-5": 400_000,
    "gpt-5-mini": 400_000,
    "gpt-5-nano": 400_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "claude-": 200_000,  # every current Claude model (1M only behind a beta header agentd does not send)
}

_learned: dict[str, int] = {}

# The numbers in each server's overflow message: OpenAI's and vLLM's "maximum context length is N
# tokens", Anthropic's "prompt is too long: 215000 tokens > 200000 maximum" (or "input length and
# `max_tokens` exceed context limit: 199759 + 8192 > 200000"), llama.cpp's "request
# (4476 tokens) exceeds the available context size (4096 tokens)". Ollama's "the input length
# exceeds the context length" names none (its window is then only what the agent file says).
_WINDOW_SAID = (
    re.compile(r"maximum context length is (\d+) tokens", re.I),
    re.compile(r"tokens > (\d+) maximum", re.I),
    re.compile(r"exceed context limit: \d+ \+ \d+ > (\d+)", re.I),
    re.compile(r"available context size \((\d+) tokens\)", re.I),
)


def known_window(ref: str) -> int | None:
    name = ref.split("/", 1)[-1]
    if name in KNOWN:
        return KNOWN[name]
    families = [k for k in KNOWN if k.endswith("-") and name.startswith(k)]
    return KNOWN[max(families, key=len)] if families else None


def window_of(ref: str, configured: int | None = None) -> int | None:
    """The window of model `ref` ("provider/model"): configured, else learned, else known."""
    if configured is not None:
        return configured
    return _learned.get(ref) or known_window(ref)


def window_from_error(text: str) -> int | None:
    """The window an overflow error names, if it names one."""
    for pattern in _WINDOW_SAID:
        if (found := pattern.search(text)) is not None:
            return int(found.group(1))
    return None


def learn(ref: str, error_text: str) -> int | None:
    """Remember for this process the window `ref`'s overflow error named; returns it (None: unnamed)."""
    window = window_from_error(error_text)
    if window is not None:
        _learned[ref] = window
    return window


def forget_learned() -> None:
    """Drop what was learned (tests start each from the table)."""
    _learned.clear()
