"""Which providers an agent's models need, and what is wrong with them before the first call.

A provider whose settings name an unset variable (`api_key: "${GROQ_API_KEY}"`) or
that has no API key never stops the daemon: an agent that uses it starts, and
`GET /agents` shows the reason among its warnings from the start (not only at the
first message); a provider no agent uses is only a line in the log.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from agentd.config.models import AgentSpec, DaemonSpec
from agentd.config.strategies import CompositeStrategy
from agentd.providers.registry import ProviderRegistry

log = logging.getLogger("agentd")


def models_used(spec: AgentSpec, memory_extractor_model: str | None) -> set[str]:
    """Every model reference the agent may call: its model, its small model and their fallbacks, its
    memory layers' models (agentd.yaml's memory_extractor_model for a layer that names none)."""
    refs = {*spec.model.chain, *spec.model.small_chain}  # fallbacks included: a dead key there is found now
    strategy = spec.memory.strategy
    layers = strategy.layers if isinstance(strategy, CompositeStrategy) else [strategy] if strategy else []
    for layer in layers:
        if "model" in type(layer).model_fields:
            ref = getattr(layer, "model", None) or memory_extractor_model
            if ref:
                refs.add(ref)
    return refs


def agent_warnings(spec: AgentSpec, settings: DaemonSpec, providers: ProviderRegistry) -> list[str]:
    """What will fail when the agent calls its models, as far as can be told without calling them."""
    refs = models_used(spec, settings.memory_extractor_model)
    return [problem for ref in sorted(refs) if (problem := providers.credential_problem(ref))]


def warn_unused_providers(settings: DaemonSpec, specs: Iterable[AgentSpec]) -> None:
    """Log the declared providers that cannot be used and that no agent uses (those used are warned
    about on their agents)."""
    used = {
        ref.partition("/")[0] for spec in specs for ref in models_used(spec, settings.memory_extractor_model)
    }
    for name, provider in sorted(settings.providers.items()):
        if provider.unavailable and name not in used:
            log.warning("provider %s cannot be used (%s); no agent uses it", name, provider.unavailable)
