"""An embedder whose calls are charged like model calls (agentd.engine.metering): to the person and
agent the memory work serves, as estimates (an embeddings API's usage is not read back here), counted
toward budgets but never refused — recall and episodic writes cannot go on without their vectors."""

from __future__ import annotations

from collections.abc import Sequence

from agentd.engine.metering import SERVED, Meter
from agentd.messages import estimate_tokens
from agentd.providers.base import Embedder

TRIGGER = "embedding"


class MeteredEmbedder:
    def __init__(self, inner: Embedder, meter: Meter, ref: str):
        self.inner, self.meter, self.ref = inner, meter, ref
        self.id = inner.id

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors = await self.inner.embed(texts)
        served = SERVED.get()
        agent = (served.agent if served else None) or ""
        await self.meter.count(agent, self.ref, estimate_tokens(sum(len(t) for t in texts)), 0, TRIGGER)
        return vectors
