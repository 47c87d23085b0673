"""Embedders behind HTTP: OpenAI-compatible `/embeddings` and Ollama's native `/api/embed`.

Both send texts in batches, reuse the chat providers' transport (deadline,
retries on 429/5xx honouring Retry-After, errors that name the fix) and check
every reply: one finite vector per text, all of one dimension. A reply that
breaks that is refused rather than stored, because a wrong vector poisons
recall silently. `id` is "<kind>/<model>": vectors from two models never mix.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any

import httpx

from agentd.errors import OperatorError, ProviderError
from agentd.providers.http import Endpoint, api_key, post_json, unreadable

OPENAI_KEY_ENV = "OPENAI_API_KEY"
BATCH_SIZE = 64  # texts per request: well under every server's input limit, few round trips


class _RemoteEmbedder:
    """The shared part: batching, concurrency, checking what comes back. Subclasses speak the wire."""

    kind: str
    default_base_url: str
    key_env: str | None = None
    start_hint = "is it running?"
    path: str
    example_model = "some-model"

    def __init__(
        self,
        *,
        name: str,
        model: str,
        client: httpx.AsyncClient,
        spec: Any = None,  # agentd.config.ProviderSpec | None (providers may not import config)
        batch_size: int = BATCH_SIZE,
        retry_base_s: float = 0.5,
    ):
        if not model:
            raise OperatorError(
                f"embedder {name}/: name the model after the slash, e.g. {name}/{self.example_model}"
            )
        self.name = name
        self.model = model
        self.id = f"{self.kind}/{model}"
        self.dim: int | None = None  # known after the first reply; a later change is refused
        self._client = client
        self._api_key: str | None = getattr(spec, "api_key", None)
        self._batch_size = max(1, batch_size)
        self._endpoint = Endpoint(
            provider=name,
            base_url=self._base_url(getattr(spec, "base_url", None)),
            key_env=self.key_env,
            start_hint=self.start_hint,
            timeout_s=getattr(spec, "timeout_s", 60.0),
            max_retries=getattr(spec, "max_retries", 3),
            retry_base_s=retry_base_s,
        )
        self._slots = asyncio.BoundedSemaphore(getattr(spec, "max_concurrency", 16))

    @property
    def base_url(self) -> str:
        return self._endpoint.base_url

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self._batch_size):
            batch = list(texts[start : start + self._batch_size])
            async with self._slots:  # held across retries, so a rate-limited server is not hit harder
                body = await self._post(batch)
            vectors.extend(self._checked(self._vectors(body, len(batch)), len(batch)))
        return vectors

    # -- subclass hooks -------------------------------------------------------------

    def _base_url(self, configured: str | None) -> str:
        return (configured or self.default_base_url).rstrip("/")

    def _payload(self, batch: list[str]) -> dict[str, Any]:
        return {"model": self.model, "input": batch}

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def _vectors(self, body: dict[str, Any], count: int) -> list[Any]:
        raise NotImplementedError

    def _not_found_hint(self) -> str:
        return f"check the model in `embedder: {self.name}/{self.model}` in agentd.yaml"

    # -- shared ---------------------------------------------------------------------

    async def _post(self, batch: list[str]) -> dict[str, Any]:
        try:
            return await post_json(
                self._client,
                self._endpoint,
                self.path,
                self._payload(batch),
                model=self.model,
                headers=self._headers(),
            )
        except ProviderError as exc:
            if exc.status != 404:
                raise
            # The chat wording points at the agent file; an embedder is configured in agentd.yaml.
            raise ProviderError(
                f"embedding model or endpoint not found (HTTP 404 at {self._endpoint.shown_url}{self.path}): "
                f"{self._not_found_hint()}; the server said: {exc}",
                provider=self.name,
                model=self.model,
                status=404,
            ) from exc

    def _checked(self, raw: list[Any], count: int) -> list[list[float]]:
        """Refuse anything but `count` finite vectors of one dimension (the one seen before, if any)."""
        if len(raw) != count:
            raise self._unreadable(f"sent {count} texts, got {len(raw)} vectors")
        vectors: list[list[float]] = []
        for i, vector in enumerate(raw):
            if not isinstance(vector, list) or not vector:
                raise self._unreadable(f"vector {i} is not a non-empty list of numbers")
            if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in vector):
                raise self._unreadable(f"vector {i} holds something other than numbers")
            floats = [float(v) for v in vector]
            if not all(math.isfinite(v) for v in floats):
                raise self._unreadable(f"vector {i} holds NaN or infinity")
            vectors.append(floats)
        dims = sorted({len(v) for v in vectors})
        if len(dims) > 1:
            raise self._unreadable(f"vectors of different dimensions {dims} in one reply")
        if self.dim is not None and dims and dims[0] != self.dim:
            raise self._unreadable(
                f"{dims[0]}-dimensional vectors where earlier replies had {self.dim}: the model behind "
                f"{self.id} changed, and vectors of two models cannot be compared"
            )
        if dims:
            self.dim = dims[0]
        return vectors

    def _unreadable(self, detail: str) -> ProviderError:
        return unreadable(self._endpoint, self.model, detail)


class OpenAIEmbedder(_RemoteEmbedder):
    """POST {base_url}/embeddings, the OpenAI API and every server that copies it (vLLM, llama.cpp, ...)."""

    kind = "openai"
    default_base_url = "https://api.openai.com/v1"
    key_env = OPENAI_KEY_ENV
    path = "/embeddings"
    example_model = "text-embedding-3-small"

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key(self._endpoint, self._api_key, self.model)}"}

    def _vectors(self, body: dict[str, Any], count: int) -> list[Any]:
        data = body.get("data")
        if not isinstance(data, list):
            raise self._unreadable("no `data` list")
        by_index: dict[int, Any] = {}
        for position, item in enumerate(data):
            if not isinstance(item, dict):
                raise self._unreadable(f"data[{position}] is not an object")
            # `index` says which input a vector belongs to; servers need not keep the order.
            index = item.get("index", position)
            if not isinstance(index, int) or isinstance(index, bool) or index in by_index:
                raise self._unreadable(f"data[{position}] has a missing, repeated or bad index {index!r}")
            by_index[index] = item.get("embedding")
        if sorted(by_index) != list(range(len(by_index))):
            raise self._unreadable(f"indices {sorted(by_index)} do not number the inputs 0..{count - 1}")
        return [by_index[i] for i in range(len(by_index))]


class OllamaEmbedder(_RemoteEmbedder):
    """Ollama's native POST {base}/api/embed: {"model", "input": [...]} -> {"embeddings": [[...]]}."""

    kind = "ollama"
    default_base_url = "http://localhost:11434"
    start_hint = "is `ollama serve` running?"
    path = "/api/embed"
    example_model = "nomic-embed-text"

    def _base_url(self, configured: str | None) -> str:
        # The chat provider of kind ollama is configured with its OpenAI-compatible .../v1;
        # the native API lives at the server's root.
        return super()._base_url(configured).removesuffix("/v1")

    def _vectors(self, body: dict[str, Any], count: int) -> list[Any]:
        embeddings = body.get("embeddings")
        if not isinstance(embeddings, list):
            raise self._unreadable("no `embeddings` list")
        return embeddings

    def _not_found_hint(self) -> str:
        return f"run `ollama pull {self.model}`, or {super()._not_found_hint()}"
