"""Model references ("provider/model"): one rule for every field that names a model.

Its own module so that every spec module (models, strategies) can use it
without importing each other.
"""

from __future__ import annotations

import re

MODEL_REF_RE = re.compile(r"^[A-Za-z0-9_.-]+/\S+$")
OFFLINE_MODEL = "offline/offline"


def normalise_model_ref(value: str) -> str:
    """`provider/model`; the bare word `offline` names the built-in offline model."""
    value = value.strip()
    if value == "offline":
        return OFFLINE_MODEL
    if not MODEL_REF_RE.match(value):
        raise ValueError(f"expected 'provider/model' (e.g. openai/gpt-4.1-mini, or offline), got {value!r}")
    return value


def optional_model_ref(value: str | None) -> str | None:
    """The validator of an optional model field (a strategy's `model`, `model.small`)."""
    return None if value is None else normalise_model_ref(value)
