"""An elicitation form's answer, as a person types it in chat (`/answer <id> ...`) or as a program sends
it over HTTP (`POST /agents/{agent}/questions/{id}`): taken to the form's field types, or refused with
a reason the person can act on."""

from __future__ import annotations

import contextlib
import json
from typing import Any

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "boolean": (bool,),
    "integer": (int,),
    "number": (int, float),
}


def typed_content(fields: dict[str, Any], text: str) -> dict[str, Any]:
    """A chat answer: one value when the form has one field, else a JSON object of its fields, each
    value taken to its field's type ("yes" to true, "7" to 7)."""
    if not fields:
        return {}
    values: Any = None
    if len(fields) == 1 and not text.startswith("{"):
        values = {next(iter(fields)): text}
    else:
        with contextlib.suppress(json.JSONDecodeError):
            values = json.loads(text)
    if not isinstance(values, dict):
        raise ValueError(f"answer with a JSON object of: {', '.join(fields)}")
    return {name: _typed(fields[name], value, name) for name, value in values.items() if name in fields}


def checked_content(fields: dict[str, Any], required: list[str], content: Any) -> dict[str, Any]:
    """An HTTP answer: exactly JSON of the form (no other fields, the required ones there, each of its
    field's type and among its `enum`); a program is held to the schema it was shown."""
    if not isinstance(content, dict):
        raise ValueError("content must be an object of the form's fields")
    if unknown := sorted(set(content) - set(fields)):
        raise ValueError(f"not fields of this form: {', '.join(unknown)} (its fields: {', '.join(fields)})")
    if missing := [name for name in required if name not in content]:
        raise ValueError(f"required fields missing: {', '.join(missing)}")
    for name, value in content.items():
        kind = fields[name].get("type", "string")
        wanted = _TYPES.get(kind)
        is_bool = isinstance(value, bool)
        if wanted is not None and (not isinstance(value, wanted) or (is_bool and kind != "boolean")):
            raise ValueError(f"{name}: expected a {kind}, got {json.dumps(value)}")
        enum = fields[name].get("enum")
        if isinstance(enum, list) and value not in enum:
            raise ValueError(f"{name}: expected one of {', '.join(map(str, enum))}, got {json.dumps(value)}")
    return content


def _typed(schema: dict[str, Any], value: Any, name: str) -> Any:
    kind = schema.get("type", "string")
    if kind == "boolean" and isinstance(value, str):
        if value.lower() not in ("yes", "no", "true", "false"):
            raise ValueError(f"{name}: expected yes or no, got {value!r}")
        return value.lower() in ("yes", "true")
    if kind in ("integer", "number") and isinstance(value, str):
        try:
            return int(value) if kind == "integer" else float(value)
        except ValueError:
            raise ValueError(f"{name}: expected a number, got {value!r}") from None
    return value
