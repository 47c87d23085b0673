"""Which providers an agent's models need, and what is wrong with them before the first call.

A provider whose settings name an unset variable (`api_key: "${GROQ_API_KEY}"`) or
that has no API key never stops the daemon: an agent that uses it starts, and
`GET /agents` shows the reason among its warnings from the start (not only at the
first message); a provider no agent uses is only a line in the log.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from agentd.config.models import AgentSpec, DaemonSpec
from agentd.providers.registry import ProviderRegistry

log = logging.getLogger("agentd")


def models_used(spec: AgentSpec, memory_extractor_model: str | None) -> set[str]:
    """Every model reference the agent may call (AgentSpec.model_refs)."""
    return spec.model_refs(memory_extractor_model)


def memory_warnings(spec: AgentSpec, settings: DaemonSpec) -> list[str]:
    """Memory layers that will do less than their name says, as configured: episodic with no embedder
    (recall by keywords only), semantic and state with only the offline model, which cannot extract
    facts or fold (no facts; a window of the recent tail instead of Σ)."""
    warnings = []
    for layer in spec.memory.layers():
        if layer.kind == "episodic" and settings.embedder is None:
            warnings.append(
                "memory.strategy episodic: no embedder (agentd.yaml: embedder:, e.g. hash/256): "
                "episodes are recalled by keywords only"
            )
        elif layer.kind in ("semantic", "state") and _structured_model(spec, layer, settings) is None:
            what = (
                "extracts no facts"
                if layer.kind == "semantic"
                else "cannot fold: a window of the recent tail"
            )
            warnings.append(
                f"memory.strategy {layer.kind}: only the offline model, which {what}; name a model "
                f"(the layer's model:, or memory_extractor_model in agentd.yaml)"
            )
    return warnings


def _structured_model(spec: AgentSpec, layer: Any, settings: DaemonSpec) -> str | None:
    """The model a fold or an extraction uses, as the engine picks it (MemoryContext.memory_model and
    memory/runs.py structured_model): None when it is only the offline model."""
    ref = getattr(layer, "model", None) or settings.memory_extractor_model
    if ref is None:
        ref = next((r for r in (spec.model.small, spec.model.name) if r and not _offline(r)), None)
    return None if ref is None or _offline(ref) else ref


def _offline(ref: str) -> bool:
    return ref.partition("/")[0] == "offline"


def agent_warnings(spec: AgentSpec, settings: DaemonSpec, providers: ProviderRegistry) -> list[str]:
    """What will fail when the agent calls its models, as far as can be told without calling them."""
    refs = models_used(spec, settings.memory_extractor_model)
    credentials = [problem for ref in sorted(refs) if (problem := providers.credential_problem(ref))]
    return credentials + memory_warnings(spec, settings)


def warn_unused_providers(settings: DaemonSpec, specs: Iterable[AgentSpec]) -> None:
    """Log the declared providers that cannot be used and that no agent uses (those used are warned
    about on their agents)."""
    used = {
        ref.partition("/")[0] for spec in specs for ref in models_used(spec, settings.memory_extractor_model)
    }
    for name, provider in sorted(settings.providers.items()):
        if provider.unavailable and name not in used:
            log.warning("provider %s cannot be used (%s); no agent uses it", name, provider.unavailable)
