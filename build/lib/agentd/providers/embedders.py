"""Embedders by provider name: `agentd.yaml: embedder: provider/model`.

`hash/<dim>` is built in and needs nothing: a feature-hashing embedder that is
honest but weak (shared words make vectors close), for offline use and tests.
Other kinds register the way a plugin would, by import path.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import pkgutil
import re
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from agentd.errors import OperatorError

# provider kind -> "module:Class", built as Class(name=, model=, client=, spec=ProviderSpec | None)
EMBEDDER_KINDS: dict[str, str] = {
    "openai": "agentd.providers.remote_embedders:OpenAIEmbedder",
    "ollama": "agentd.providers.remote_embedders:OllamaEmbedder",
    "local": "agentd.providers.local_embedder:LocalEmbedder",
}
_TOKEN = re.compile(r"[a-z0-9]+")


class HashEmbedder:
    """Feature hashing of word unigrams and bigrams into `dim` signed buckets, L2-normalised."""

    def __init__(self, dim: int = 256):
        if not 8 <= dim <= 8192:
            raise OperatorError(f"hash embedder dimension must be 8..8192, got {dim}")
        self.dim = dim
        self.id = f"hash/{dim}"

    def embed_one(self, text: str) -> list[float]:
        vector = [0.0] * self.dim
        words = _TOKEN.findall(text.lower())
        features = words + [f"{a} {b}" for a, b in itertools.pairwise(words)]
        for feature in features:
            digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
            bucket = int.from_bytes(digest[:4], "little") % self.dim
            sign = 1.0 if digest[4] & 1 else -1.0
            vector[bucket] += sign * (1.0 if " " not in feature else 0.5)
        norm = math.sqrt(sum(v * v for v in vector))
        return [v / norm for v in vector] if norm else vector

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.embed_one(t) for t in texts]


def build_embedder(ref: str, providers: Mapping[str, Any], client: httpx.AsyncClient | None = None) -> Any:
    """The embedder named by `provider/model` (providers: agentd.yaml's named providers)."""
    return _construct(ref, providers, client or httpx.AsyncClient())


def check_embedder(ref: str, providers: Mapping[str, Any]) -> None:
    """Raise the OperatorError build_embedder would raise for `ref`, for `agentd check`.

    The same constructors run, given no HTTP client: nothing can be sent.
    """
    _construct(ref, providers, None)


def _construct(ref: str, providers: Mapping[str, Any], client: httpx.AsyncClient | None) -> Any:
    name, _, model = ref.partition("/")
    if name == "hash":
        try:
            return HashEmbedder(int(model or 256))
        except ValueError:
            raise OperatorError(f"embedder {ref!r}: use hash/<dimension>, e.g. hash/256") from None
    spec = providers.get(name)
    kind = spec.kind if spec is not None else name
    if kind not in EMBEDDER_KINDS:
        raise OperatorError(
            f"embedder {ref!r}: unknown provider {name!r}; use hash/<dim>, openai/<model>, ollama/<model>, "
            "local/<sentence-transformers model or folder>, or a provider of kind openai/ollama declared in agentd.yaml"
        )
    cls = pkgutil.resolve_name(EMBEDDER_KINDS[kind])
    return cls(name=name, model=model, client=client, spec=spec)
