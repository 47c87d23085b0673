"""`memory.strategy`: which memory an agent's conversations get (product.md §5).

Each kind is its own spec model, chosen by `kind`; an unknown kind or field is
a config error like any other.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from agentd.config.base import Spec
from agentd.config.refs import ModelRef

DEFAULT_EXTRACTOR = (
    "Extract durable facts about the person and their work from the exchange below: preferences, "
    "names, decisions, constraints, things they own or use. Skip small talk and anything uncertain."
)


class NoneStrategy(Spec):
    """Nothing carried: every run starts blank."""

    kind: Literal["none"]


class FullStrategy(Spec):
    """The whole transcript; compaction still applies (memory.compact_at_tokens)."""

    kind: Literal["full"]


class WindowStrategy(Spec):
    """The last `messages` messages; the purpose is always kept."""

    kind: Literal["window"]
    messages: int = Field(default=20, ge=1, le=10_000)


class SummarizedStrategy(Spec):
    """A rolling summary refreshed every `every` messages, plus the messages since."""

    kind: Literal["summarized"]
    every: int = Field(default=20, ge=2, le=10_000)
    model: ModelRef | None = None


class EpisodicStrategy(Spec):
    """Past exchanges recalled by relevance (vectors fused with keywords), per speaker."""

    kind: Literal["episodic"]
    top_k: int = Field(default=5, ge=1, le=100)
    threshold: float = Field(default=0.0, ge=0.0, le=1.0)
    half_life_days: float | None = Field(default=None, gt=0)
    write: Literal["always", "tool"] = "always"
    # ranking: the share of relevance that is cosine (the rest is the keyword score)
    vector_weight: float = Field(default=0.5, ge=0.0, le=1.0)
    # how far an episode that ends by asking ("...?") ranks below one that says something
    question_weight: float = Field(default=0.8, ge=0.0, le=1.0)
    # when the message names a date, how far episodes said at other times rank below those said then
    date_weight: float = Field(default=0.5, ge=0.0, le=1.0)
    # how strongly the top k avoid repeating one another (0: pure relevance order)
    diversity: float = Field(default=0.0, ge=0.0, le=1.0)
    # shown with each recalled episode: this many said just before and after it in its conversation
    neighbours: int = Field(default=2, ge=0, le=10)
    # the most recalled text put in the prompt (estimated tokens: characters / 4)
    recall_tokens: int = Field(default=1500, ge=50, le=100_000)
    # retention: the oldest, least important episodes beyond these are deleted (None: kept)
    max_episodes: int | None = Field(default=None, ge=1)
    max_age_days: float | None = Field(default=None, gt=0)


class SemanticStrategy(Spec):
    """Facts {key, value, confidence, source} extracted after each run, per speaker; no vectors."""

    kind: Literal["semantic"]
    extractor: str = DEFAULT_EXTRACTOR
    model: ModelRef | None = None


STATE_FIELD_RE = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"


class StateField(Spec):
    name: str = Field(json_schema_extra={"pattern": STATE_FIELD_RE})
    description: str

    @field_validator("name")
    @classmethod
    def _identifier(cls, v: str) -> str:
        if not re.match(STATE_FIELD_RE, v):
            raise ValueError("a field name is 1-64 letters, digits or '_', not starting with a digit")
        return v


class StateStrategy(Spec):
    """A structured Σ with a fixed set of fields, folded once per run by a model."""

    kind: Literal["state"]
    spec: str
    fields: list[StateField] = Field(min_length=1)
    max_chars: int = Field(default=4000, ge=100, le=1_000_000)
    model: ModelRef | None = None
    # Without any model to fold with, the strategy degrades to a window of this many recent messages.
    tail_messages: int = Field(default=8, ge=1, le=1000)

    @model_validator(mode="after")
    def _unique(self) -> StateStrategy:
        names = [f.name for f in self.fields]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"field names must be unique; repeated: {', '.join(duplicates)}")
        return self


LayerStrategy = Annotated[
    NoneStrategy
    | FullStrategy
    | WindowStrategy
    | SummarizedStrategy
    | EpisodicStrategy
    | SemanticStrategy
    | StateStrategy,
    Field(discriminator="kind"),
]


class CompositeStrategy(Spec):
    """Layers consulted and written in order (e.g. window + episodic)."""

    kind: Literal["composite"]
    layers: list[LayerStrategy] = Field(min_length=1)


StrategySpec = Annotated[
    NoneStrategy
    | FullStrategy
    | WindowStrategy
    | SummarizedStrategy
    | EpisodicStrategy
    | SemanticStrategy
    | StateStrategy
    | CompositeStrategy,
    Field(discriminator="kind"),
]
