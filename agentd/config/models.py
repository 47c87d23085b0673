"""Validated, frozen specs for `agents/<name>.yaml` and `agentd.yaml`."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Collection
from typing import Any, Literal

from pydantic import ConfigDict, Field, PrivateAttr, ValidationInfo, field_validator, model_validator
from pydantic.json_schema import JsonDict

from agentd.config.base import Spec
from agentd.config.discord import DiscordSpec
from agentd.config.media import InputKind, MediaSpec, default_input
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
from agentd.config.slack import SlackSpec
from agentd.config.strategies import CompositeStrategy, StrategySpec
from agentd.config.telegram import TelegramSpec
from agentd.config.tools import Loc, ToolsSpec, subagent_tool_name
from agentd.errors import OperatorError

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


class WebhookSpec(Spec):
    """`channels.webhook: {}` enables POST /agents/<name>/messages."""


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


_OCTET = r"(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
# `is_loopback` for an editor, in its usual spellings (an unusual one of ::1, say 0::1, the schema
# asks a token for where the loader would not)
LOOPBACK_RE = rf"^(localhost|127(\.{_OCTET}){{3}}|::1|0:0:0:0:0:0:0:1)$"


class HttpSpec(Spec):
    # `_token_beyond_loopback` for an editor
    model_config = ConfigDict(
        json_schema_extra={
            "if": {"required": ["host"], "properties": {"host": {"not": {"pattern": LOOPBACK_RE}}}},
            "then": {"required": ["token"], "properties": {"token": {"type": "string", "minLength": 1}}},
        }
    )

    host: str = "127.0.0.1"
    port: int = Field(default=8765, ge=0, le=65535)
    token: str | None = None
    # a message's 32,000 characters may take 12 bytes each as JSON (\ud83d\ude00 escapes)
    max_body_bytes: int = Field(default=1_048_576, gt=0)

    @field_validator("token")
    @classmethod
    def _empty_is_none(cls, v: str | None) -> str | None:
        # `token: "${AGENTD_TOKEN:-}"` with the variable unset means: no token
        return v or None

    @model_validator(mode="after")
    def _token_beyond_loopback(self) -> HttpSpec:
        if not is_loopback(self.host) and not self.token:
            raise ValueError(
                f"refusing to listen on {self.host} without a token: set http.token (every request then "
                "needs Authorization: Bearer <token>), or bind to 127.0.0.1"
            )
        return self


def is_loopback(host: str) -> bool:
    """Whether only this machine can reach `host` (anything else needs http.token)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class StoreSpec(Spec):
    # NORMAL: an OS crash may lose the last commits but never corrupts; a killed
    # process loses nothing. FULL: fsync on every commit group.
    synchronous: Literal["normal", "full"] = "normal"
    # agent files open at once (each holds up to 3 descriptors: the file, its -wal and -shm); the
    # least recently used beyond this are closed, and so is any unused for close_idle_after_s
    max_open_files: int = Field(default=256, ge=1)
    close_idle_after_s: float = Field(default=60.0, gt=0)
    # one budget for the conversations kept in memory by every agent, in MB (least recently used go first)
    hot_cache_mb: float = Field(default=512, gt=0)
    # postgresql://user:password@host:port/database puts every agent in one PostgreSQL database that
    # several daemons may share (AGENTD_STORE_URL says the same); none: one SQLite file per agent
    url: str | None = Field(default=None, json_schema_extra={"pattern": r"^postgres(ql)?://|^\s*$"})
    # With several daemons on one store: how long a lease (a conversation being answered, a bot
    # connection) outlives a daemon that stopped renewing it (killed), before another takes over.
    lease_s: float = Field(default=15.0, ge=1.0, le=600.0)
    # What sits between agentd and PostgreSQL: none, or PgBouncer in `session` or `transaction` pool
    # mode (transaction: no server-side prepared statements nor session state; docs/scaling.md)
    pooler: Literal["none", "session", "transaction"] = "none"

    @field_validator("url")
    @classmethod
    def _postgres_url(cls, v: str | None) -> str | None:
        if v is None or not v.strip():
            return None  # (an empty ${VAR:-}: SQLite)
        if not re.match(r"^postgres(ql)?://", v):
            raise ValueError("expected a postgresql:// URL (postgresql://user:password@host:port/database)")
        return v


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
