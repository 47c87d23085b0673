"""Named providers: the built-ins (openai, anthropic, ollama, offline) and those in agentd.yaml.

A model reference is "provider/model"; `resolve` returns the provider object
and the bare model name. Built-ins register the way a plugin would: by kind,
in `PROVIDER_KINDS`.
"""

from __future__ import annotations

import pkgutil
from typing import Any

import httpx

from agentd.errors import OperatorError
from agentd.providers.base import Completion, CompletionRequest, ModelProvider
from agentd.providers.offline import OfflineProvider
from agentd.providers.timed import ReportCall, TimedProvider

# kind -> "module:Class"; remote kinds are built with keyword arguments from their ProviderSpec.
PROVIDER_KINDS: dict[str, str] = {
    "openai": "agentd.providers.openai:OpenAIProvider",
    "ollama": "agentd.providers.openai:OpenAIProvider",
    "anthropic": "agentd.providers.anthropic:AnthropicProvider",
}
BUILTIN_NAMES = ("openai", "anthropic", "ollama", "offline")


class ProviderRegistry:
    def __init__(
        self,
        specs: dict[str, Any],
        client: httpx.AsyncClient | None = None,
        *,
        report_calls: ReportCall | None = None,
    ):
        """`specs`: name -> ProviderSpec (agentd.config.ProviderSpec); built-ins need none.
        `report_calls`: told the duration and outcome of every completion (the daemon's metrics)."""
        self._specs = dict(specs)
        self._client = client
        self._report_calls = report_calls
        self._built: dict[str, ModelProvider] = {}

    def names(self) -> list[str]:
        return sorted(set(BUILTIN_NAMES) | set(self._specs) | set(self._built))

    def register(self, name: str, provider: ModelProvider) -> None:
        """Use this provider object for `name/...` references (in-process fakes, embedding)."""
        self._built[name] = self._timed(name, provider)

    def _timed(self, name: str, provider: ModelProvider) -> ModelProvider:
        return provider if self._report_calls is None else TimedProvider(name, provider, self._report_calls)

    def check(self, ref: str) -> None:
        """Raise OperatorError when the reference names no known provider."""
        name = ref.split("/", 1)[0]
        if name not in self._specs and name not in BUILTIN_NAMES and name not in self._built:
            raise OperatorError(
                f"unknown provider {name!r} in model {ref!r}: use one of {', '.join(self.names())}, "
                "or declare it under providers: in agentd.yaml"
            )

    def resolve(self, ref: str) -> tuple[ModelProvider, str]:
        self.check(ref)
        name, _, model = ref.partition("/")
        provider = self._built.get(name)
        if provider is None:
            provider = self._built[name] = self._timed(name, self._build(name))
        return provider, model

    def _build(self, name: str) -> ModelProvider:
        spec = self._specs.get(name)
        if spec is not None and spec.unavailable:
            return UnavailableProvider(name, spec.unavailable)
        kind = spec.kind if spec is not None else name
        if kind == "offline":
            return OfflineProvider()
        if self._client is None:
            self._client = httpx.AsyncClient()
        cls = pkgutil.resolve_name(PROVIDER_KINDS[kind])
        kwargs: dict[str, Any] = {"name": name, "client": self._client}
        if kind != "anthropic":
            kwargs["kind"] = kind
        if spec is not None:
            kwargs.update(
                base_url=spec.base_url,
                api_key=spec.api_key,
                timeout_s=spec.timeout_s,
                max_retries=spec.max_retries,
                max_concurrency=spec.max_concurrency,
            )
        provider: ModelProvider = cls(**kwargs)
        return provider

    def credential_problem(self, ref: str) -> str | None:
        """Why calls to model `ref` cannot succeed as configured (no API key, a variable of its settings
        not set, an unknown provider), found without calling it; None when nothing is known wrong."""
        try:
            provider, model = self.resolve(ref)
        except OperatorError as e:
            return str(e)
        check = getattr(provider, "credential_problem", None)  # providers that need a key have it
        return check(model) if check is not None else None

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()


class UnavailableProvider:
    """A provider whose settings name a variable that is not set: every call fails, saying which."""

    def __init__(self, name: str, reason: str):
        self.name = name
        self.reason = reason

    def credential_problem(self, model: str) -> str:
        return (
            f"provider {self.name} (model {model}) cannot be used: {self.reason}; set it and restart agentd"
        )

    async def complete(self, request: CompletionRequest) -> Completion:
        raise OperatorError(self.credential_problem(request.model))
