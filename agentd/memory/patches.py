"""State patches as pure functions: read a model's JSON answer, check a patch, apply it, measure Σ.

Shared by the after-run memory jobs that ask a model for JSON (fold, extraction):
how an answer is read, and how a failed call is classified.

A patch holds only the keys that change; `null` deletes a key. It is refused
as a whole (PatchRefused, whose reason the model is shown on its one retry;
an answer that is not JSON at all is AnswerRefused, whatever the job)
when it is not a JSON object, names a key outside the declared fields, or
would make Σ's JSON longer than max_chars.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from agentd.errors import ProviderError

# A fenced block anywhere in the answer: ```json ... ``` or ``` ... ```.
_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n?(.*?)```", re.S)
# HTTP statuses where the provider judged this very request invalid: sending it again cannot help.
REJECTED_REQUEST_STATUSES = frozenset({400, 413, 422})
# A tool result is cut to this many characters in what a memory model reads: it needs what
# happened, and a thirty-step run of large results must not make the one fold call huge.
TOOL_RESULT_CHARS = 2000
_MISSING = object()


class AnswerRefused(ValueError):
    """A memory model's JSON answer breaks its contract (not JSON, or not what the job asked for: a
    fold's patch, an extraction's facts); `reason` is written for the model to act on."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


class PatchRefused(AnswerRefused):
    """A fold's patch cannot be applied to Σ (not an object, a key outside the fields, Σ too long)."""


@dataclass(frozen=True, slots=True)
class FoldResult:
    """Σ after a patch, and what the patch really changed (for the audit trail)."""

    sigma: dict[str, Any]
    changed: tuple[str, ...]
    deleted: tuple[str, ...]


def strip_fence(text: str) -> str:
    """The JSON inside a ```json fence when the model used one, else the text itself."""
    match = _FENCE.search(text)
    return (match.group(1) if match else text).strip()


def parse_json_answer(text: str) -> Any:
    """A model's answer as JSON (a ```json fence tolerated); AnswerRefused when it is not JSON."""
    body = strip_fence(text)
    if not body:
        raise AnswerRefused("the answer was empty; answer with one JSON object")
    try:
        return json.loads(body)
    except json.JSONDecodeError as e:
        raise AnswerRefused(
            f"the answer is not valid JSON ({e.msg} at line {e.lineno} column {e.colno}); "
            "answer with one JSON object and nothing else"
        ) from None


def sigma_json(sigma: Mapping[str, Any]) -> str:
    """Σ as the model sees it and as max_chars measures it: compact JSON, keys in field order."""
    return json.dumps(sigma, ensure_ascii=False, separators=(",", ":"))


def validate_patch(patch: Any, fields: Collection[str]) -> dict[str, Any]:
    """The patch as a dict; refused whole when it is not an object or names an unknown key."""
    if not isinstance(patch, dict):
        raise PatchRefused(f"the patch must be a JSON object of changed keys, not a JSON {_json_type(patch)}")
    unknown = [k for k in patch if k not in fields]
    if unknown:
        raise PatchRefused(
            f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(repr(k) for k in unknown)}: "
            f"the only keys allowed are {', '.join(fields)}; the whole patch was refused"
        )
    return patch


def apply_patch(sigma: Mapping[str, Any], patch: Mapping[str, Any], fields: Collection[str]) -> FoldResult:
    """Σ with the patch applied (a new dict, keys in field order): a value sets, null deletes."""
    merged = dict(sigma)
    changed, deleted = [], []
    for key, value in patch.items():
        if value is None:
            if key in merged:
                del merged[key]
                deleted.append(key)
        elif merged.get(key, _MISSING) != value:
            merged[key] = value
            changed.append(key)
    # Keys in field order; a key whose field was removed from the definition is dropped here.
    ordered = {k: merged[k] for k in fields if k in merged}
    deleted += [k for k in merged if k not in ordered]
    return FoldResult(ordered, tuple(changed), tuple(deleted))


def check_size(sigma: Mapping[str, Any], max_chars: int) -> int:
    """Σ's JSON length; PatchRefused when it is over max_chars."""
    size = len(sigma_json(sigma))
    if size > max_chars:
        raise PatchRefused(
            f"the patched state would be {size} characters of JSON, over the limit of {max_chars}; "
            "shorten values or delete keys that no longer matter (set them to null)"
        )
    return size


def fold_answer(answer: str, sigma: Mapping[str, Any], fields: Collection[str], max_chars: int) -> FoldResult:
    """Parse, validate, apply and size-check a fold model's answer in one step."""
    patch = validate_patch(parse_json_answer(answer), fields)
    result = apply_patch(sigma, patch, fields)
    check_size(result.sigma, max_chars)
    return result


def rejected_request(error: Exception) -> bool:
    """True when the provider refused this request's content (so keeping it would fail forever).

    Every other failure keeps the queue: an unreachable provider, 5xx or 429
    after the provider's own retries, a refused key or unknown model (the
    operator fixes the config and nothing is lost meanwhile).
    """
    return (
        isinstance(error, ProviderError)
        and not error.unreachable
        and error.status in REJECTED_REQUEST_STATUSES
    )


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    return "number"
