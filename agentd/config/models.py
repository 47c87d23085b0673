"""Validated, frozen specs for `agents/<name>.yaml` and `agentd.yaml`."""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any, Literal

from pydantic import Field, PrivateAttr, ValidationInfo, field_validator, model_validator
from pydantic.json_schema import JsonDict

from agentd.config.base import Spec
from agentd.config.budgets import BudgetSpec, PriceSpec, RateLimitSpec
from agentd.config.discord import DiscordSpec
from agentd.config.http_store import HttpSpec, StoreSpec
from agentd.config.media import InputKind, MediaSpec, default_input
from agentd.config.people import DeclaredPeople, check_people
from agentd.config.refs import (
    EMBEDDER_CHECK,
    MODEL_REF_SCHEMA,
    OFFLINE_MODEL,
    ModelRef,
    ProviderKind,
    context_value,
    normalise_model_ref,
    provider_names,
)
from agentd.config.schedule import ScheduleSpec
from agentd.config.slack import SlackSpec
from agentd.config.strategies import CompositeStrategy, StrategySpec
from agentd.config.telegram import TelegramSpec
from agentd.config.tools import Loc, ToolsSpec, subagent_tool_name
from agentd.config.webhook import WebhookSpec
from agentd.errors import OperatorError

BusyMode = Literal["queue", "collect"]
AGENT_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
PROVIDER_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")


def _model_or_shorthand(schema: JsonDict) -> None:
    """`model: openai/gpt-4.1-mini` is `model: {name: openai/gpt-4.1-mini}` (`_shorthand`): the schema
    offers both."""
    ref = schema.pop("$ref")
    schema["anyOf"] = [MODEL_REF_SCHEMA, {"$ref": ref}]


class ModelSpec(Spec):
    name: ModelRef
    # tried in order when `name` fails in a way another model can help with (down, overloaded,
    # rate-limited past its retries, key refused): agentd.engine.model_chain
    fallbacks: list[ModelRef] = []
    small: ModelRef | None = None
    small_fallbacks: list[ModelRef] = []  # the same for `small`
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_output_tokens: int | None = Field(default=None, gt=0)
    # tokens `name`'s context window holds; unset: the table of well-known models, else what the
    # provider's first overflow error says (agentd.providers.windows). Compaction runs before a
    # request would exceed it.
    context_window: int | None = Field(default=None, gt=0)
    # what `name` takes (text, image, audio); unset: agentd.config.media.default_input's table
    input: list[InputKind] | None = None

    @property
    def provider(self) -> str:
        return self.name.split("/", 1)[0]

    def takes(self, kind: InputKind) -> bool:
        return kind in (self.input if self.input is not None else default_input(self.name))

    @property
    def chain(self) -> tuple[str, ...]:
        """The chat models in the order they are tried."""
        return (self.name, *self.fallbacks)

    @property
    def small_chain(self) -> tuple[str, ...]:
        """The small models in the order they are tried (the main chain when no small model is set)."""
        return (self.small, *self.small_fallbacks) if self.small else self.chain

    @model_validator(mode="after")
    def _chains(self) -> ModelSpec:
        if self.small_fallbacks and not self.small:
            raise ValueError("small_fallbacks needs model.small: they are tried when the small model fails")
        for field, chain in (("fallbacks", self.chain), ("small_fallbacks", self.small_chain)):
            repeated = sorted({ref for ref in chain if chain.count(ref) > 1})
            if repeated:
                raise ValueError(f"{field}: {', '.join(repeated)} is named twice in its chain")
        return self


class MemorySpec(Spec):
    scope: Literal["none", "thread"] = "none"
    persistent: bool = False
    compact_at_tokens: int | Literal[False] = Field(
        default=50000,
        json_schema_extra={"anyOf": [{"type": "integer", "exclusiveMinimum": 0}, {"const": False}]},
    )
    max_value_chars: int = Field(default=4000, gt=0, le=1_000_000)
    # agent: one set of facts for everyone; user: each person's facts are theirs alone
    persistent_scope: Literal["agent", "user"] = "agent"
    # ask: every remember, forget and save_episode waits for a person's yes (the approval flow of
    # `tools.ask`, with its approvers, expiry and audit trail)
    writes: Literal["auto", "ask"] = "auto"
    strategy: StrategySpec | None = None
    # secrets (API keys, tokens, private keys, card numbers) in what is written to memory:
    # redact them, refuse a tool's write that holds one, or allow them (agentd/memory/screening.py)
    secrets: Literal["redact", "refuse", "allow"] = "redact"

    def layers(self) -> list[Any]:
        """The strategy's layers: a composite's, else the strategy alone (none without one)."""
        strategy = self.strategy
        if strategy is None:
            return []
        return list(strategy.layers) if isinstance(strategy, CompositeStrategy) else [strategy]

    @field_validator("compact_at_tokens", mode="before")
    @classmethod
    def _threshold(cls, v: Any) -> Any:
        # Said once here: the union's members would each refuse a bad value in their own words.
        if v is False:
            return v
        count = v
        if isinstance(v, str):  # a quoted number, as pydantic would accept it
            count = int(v) if v.strip().isdigit() else None
        if isinstance(count, bool) or not isinstance(count, int):
            raise ValueError(f"expected a token count or false, got {v!r}")
        if count <= 0:
            raise ValueError("expected a positive token count or false")
        return count


class TranscriptsSpec(Spec):
    """How conversation transcripts are stored."""

    # store each turn's messages with secrets redacted (the model of that turn still saw them)
    redact_secrets: bool = False


def _written_means_enabled(schema: JsonDict) -> None:
    """`discord:` with nothing after it is `discord: {}` (`_null_channel_is_empty`), which lacks the
    channel's token: the schema offers no null for a channel that needs settings."""
    branches = schema.pop("anyOf")
    assert isinstance(branches, list)
    schema["anyOf"] = [b for b in branches if b != {"type": "null"}]


class ChannelsSpec(Spec):
    webhook: WebhookSpec | None = None
    discord: DiscordSpec | None = Field(default=None, json_schema_extra=_written_means_enabled)
    slack: SlackSpec | None = Field(default=None, json_schema_extra=_written_means_enabled)
    telegram: TelegramSpec | None = Field(default=None, json_schema_extra=_written_means_enabled)

    def enabled(self) -> list[str]:
        return [name for name in type(self).model_fields if getattr(self, name) is not None]


class SubagentSpec(Spec):
    """Another agent this one may call as a tool, optionally with a different memory for this slot."""

    agent: str = Field(json_schema_extra={"pattern": AGENT_NAME_RE.pattern})
    description: str | None = None
    memory_override: StrategySpec | None = None

    @field_validator("agent")
    @classmethod
    def _name(cls, v: str) -> str:
        if not AGENT_NAME_RE.match(v):
            raise ValueError(f"{v!r} is not an agent name ([a-z0-9][a-z0-9_-]*)")
        return v


class AgentSpec(Spec):
    name: str
    purpose: str = ""
    model: ModelSpec = Field(default=ModelSpec(name=OFFLINE_MODEL), json_schema_extra=_model_or_shorthand)
    memory: MemorySpec = MemorySpec()
    transcripts: TranscriptsSpec = TranscriptsSpec()
    channels: ChannelsSpec = ChannelsSpec()
    max_tool_steps: int = Field(default=8, ge=1, le=100)
    subagents: list[SubagentSpec] = []
    tools: ToolsSpec = ToolsSpec()
    media: MediaSpec = MediaSpec()
    busy: BusyMode = "queue"  # messages arriving while a turn runs (agentd.engine.collecting)
    max_run_s: float = Field(default=300, gt=0, le=86400)  # a run past it is stopped (agentd.engine.stopping)
    models_allowed: list[ModelRef] = []  # what /model may switch a conversation to (none: /model refuses)
    schedule: ScheduleSpec | None = None  # jobs and heartbeat (agentd/config/schedule.py); none: no jobs

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not AGENT_NAME_RE.match(v):
            raise ValueError(
                f"agent name {v!r} (the file name) must match [a-z0-9][a-z0-9_-]*: "
                "lower-case letters, digits, '_' and '-'"
            )
        return v

    def reference_problems(self, known_agents: Collection[str] | None = None) -> list[tuple[Loc, str]]:
        """Cross-references between parts of the file that are wrong (located by path); with
        `known_agents` (`agentd check`: the folder's agents), a sub-agent must name one of them."""
        problems = self.tools.reference_problems([subagent_tool_name(s.agent) for s in self.subagents])
        problems += (
            self.schedule.reference_problems(self.channels.enabled(), self.channels.webhook)
            if self.schedule
            else []
        )
        if known_agents is not None:
            known = ", ".join(sorted(known_agents)) or "none"
            problems += [
                (("subagents", i, "agent"), f"no agent named {s.agent!r} in this folder (agents: {known})")
                for i, s in enumerate(self.subagents)
                if s.agent not in known_agents
            ]
        return problems

    def model_refs(self, memory_extractor_model: str | None) -> set[str]:
        """Every model reference the agent may call: its model, its small model and their fallbacks, its
        memory layers' models (agentd.yaml's memory_extractor_model for a layer that names none)."""
        refs = {
            *self.model.chain,
            *self.model.small_chain,
            *self.models_allowed,
        }  # fallbacks included: a dead key there is found now
        refs.update(ref for ref in (self.media.image_model, self.media.transcribe) if ref)
        for layer in self.memory.layers():
            if "model" in type(layer).model_fields:
                ref = getattr(layer, "model", None) or memory_extractor_model
                if ref:
                    refs.add(ref)
        return refs

    @field_validator("model", mode="before")
    @classmethod
    def _shorthand(cls, v: Any) -> Any:
        return {"name": v} if isinstance(v, str) else v

    @field_validator("channels", mode="before")
    @classmethod
    def _null_channel_is_empty(cls, v: Any) -> Any:
        # `webhook:` with nothing after it is YAML null; treat it as `webhook: {}`.
        if isinstance(v, dict):
            return {k: ({} if val is None else val) for k, val in v.items()}
        return v


class ProviderSpec(Spec):
    kind: ProviderKind
    base_url: str | None = None
    api_key: str | None = None
    timeout_s: float = Field(
        default=60.0, gt=0, description="seconds one attempt may take, from connecting to the last byte"
    )
    max_retries: int = Field(
        default=3,
        ge=0,
        le=10,
        description="retries of a 408, 429, 5xx, timeout or dropped connection, with backoff (Retry-After "
        "honoured); other errors fail at once",
    )
    max_concurrency: int = Field(default=16, ge=1, description="calls in flight at once to this provider")
    _unavailable: str | None = PrivateAttr(default=None)

    @property
    def unavailable(self) -> str | None:
        """Why the provider cannot be used (a variable its settings name is not set), or None."""
        return self._unavailable

    def mark_unavailable(self, reason: str) -> None:
        self._unavailable = reason


class DefaultsSpec(Spec):
    model: ModelRef | None = None


class DaemonSpec(Spec):
    providers: dict[str, ProviderSpec] = Field(
        default={}, json_schema_extra={"propertyNames": {"pattern": PROVIDER_NAME_RE.pattern}}
    )
    # provider/model of the embedder episodic memory uses: openai/..., ollama/..., hash/<dim>, local/...
    embedder: str | None = None
    # the model for folds and fact extraction when a strategy names none
    memory_extractor_model: ModelRef | None = None
    http: HttpSpec = HttpSpec()
    store: StoreSpec = StoreSpec()
    defaults: DefaultsSpec = DefaultsSpec()
    people: DeclaredPeople = {}  # accounts that are one person (agentd/config/people.py)

    @field_validator("people")
    @classmethod
    def _people(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        return check_people(v)

    prices: dict[str, PriceSpec] = {}  # per 1M tokens, by provider/model (agentd/config/budgets.py)
    budgets: list[BudgetSpec] = []
    rate_limits: list[RateLimitSpec] = []

    @field_validator("embedder")
    @classmethod
    def _embedder(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is None:
            return None
        ref = normalise_model_ref(v)
        check = context_value(info, EMBEDDER_CHECK)
        if check is not None and "providers" in info.data:  # (bad providers are reported on their own)
            try:
                check(ref, info.data["providers"])
            except OperatorError as e:
                # the error's location already names the key
                raise ValueError(str(e).removeprefix(f"embedder {ref!r}: ")) from None
        return ref

    def provider_names(self) -> list[str]:
        """The providers an agent's model references may name."""
        return provider_names(self.providers)

    @model_validator(mode="after")
    def _provider_names(self) -> DaemonSpec:
        for name in self.providers:
            if not PROVIDER_NAME_RE.match(name):
                raise ValueError(f"provider name {name!r} may only use letters, digits, '_', '.', '-'")
        return self
