"""Model references ("provider/model"): one rule for every field that names a model.

Its own module so that every spec module (models, strategies) can use it
without importing each other. A reference's form is always checked; its
provider only when the caller says which providers exist, through pydantic's
validation context (`{PROVIDERS: names}`): `agentd run` and `agentd check`
pass the names agentd.yaml and the built-ins give, so both refuse the same
references, while tests may register providers of their own in process.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, ValidationInfo, WithJsonSchema
from pydantic.json_schema import JsonDict

MODEL_REF_RE = re.compile(r"^[A-Za-z0-9_.-]+/\S+$")
OFFLINE_MODEL = "offline/offline"
ProviderKind = Literal["openai", "anthropic", "ollama", "offline"]
BUILTIN_PROVIDERS: tuple[str, ...] = get_args(ProviderKind)  # each kind is also a provider named after it
# Validation context keys. PROVIDERS: the provider names a model reference may use. EMBEDDER_CHECK: a
# callable (ref, {name: ProviderSpec}) raising OperatorError for an embedder `agentd run` would refuse
# (embedders live in agentd.providers, above config: agentd.providers.embedders.check_embedder).
PROVIDERS = "providers"
EMBEDDER_CHECK = "embedder"


def normalise_model_ref(value: str) -> str:
    """`provider/model`; the bare word `offline` names the built-in offline model."""
    value = value.strip()
    if value == "offline":
        return OFFLINE_MODEL
    if not MODEL_REF_RE.match(value):
        raise ValueError(f"expected 'provider/model' (e.g. openai/gpt-4.1-mini, or offline), got {value!r}")
    return value


def provider_names(declared: Iterable[str]) -> list[str]:
    """The providers model references may name: the built-ins and those agentd.yaml declares."""
    return sorted(set(BUILTIN_PROVIDERS) | set(declared))


def context_value(info: ValidationInfo, key: str) -> Any:
    """What the caller put under `key` in the validation context, or None."""
    return info.context.get(key) if isinstance(info.context, dict) else None


def _checked_model_ref(value: str, info: ValidationInfo) -> str:
    ref = normalise_model_ref(value)
    known: Collection[str] | None = context_value(info, PROVIDERS)
    provider = ref.partition("/")[0]
    if known is not None and provider not in known:
        raise ValueError(
            f"unknown provider {provider!r} in model {ref!r}: use one of {', '.join(sorted(known))}, "
            "or declare it under providers: in agentd.yaml"
        )
    return ref


# What an editor's schema says of a model reference: the loader's form (surrounding blanks are stripped),
# or a value read from the environment (`${AGENTD_MODEL:-offline}`, replaced before validation; JSON
# Schema's `pattern` searches, so the unanchored `\$\{` alternative accepts any text holding one). Which
# providers exist is agentd.yaml's, beyond a schema: `agentd check` says that.
MODEL_REF_SCHEMA: JsonDict = {
    "type": "string",
    "pattern": rf"^\s*(offline|{MODEL_REF_RE.pattern.strip('^$')})\s*$|\$\{{",
    "description": "provider/model (e.g. openai/gpt-4.1-mini), or offline",
}

# The type of every field that names a model: `model.name`, `model.small`, a strategy's `model`, ...
ModelRef = Annotated[str, AfterValidator(_checked_model_ref), WithJsonSchema(MODEL_REF_SCHEMA)]
