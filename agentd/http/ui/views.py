"""Small helpers the templates call: times, links, and how to show a value a strategy reports.

They return plain strings and never markup: the templates escape everything they print.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode

from agentd.messages import MediaPart

# What the keys strategies report mean, for people; a key missing here reads as its words.
LABELS = {
    "context_tokens": "context (tokens, last call)",
    "tokens_estimated": "tokens estimated",
    "compact_at_tokens": "compacts at (tokens)",
    "window": "window (messages)",
    "first_seq": "first message shown (#)",
    "out_of_view": "messages out of view",
    "upto_seq": "folded up to message #",
    "every": "refreshes every (messages)",
    "refresh_due": "refresh due",
    "degraded": "degraded (no model)",
    "sigma": "Σ (state)",
    "sigma_chars": "Σ size (characters)",
    "max_chars": "Σ limit (characters)",
    "not_folded": "not folded yet",
    "not_extracted": "messages not extracted yet",
    "top_k": "recalls at most",
    "threshold": "minimum score",
    "half_life_days": "half-life (days)",
    "last_recall": "last recall",
    "write": "writes episodes",
    "created_at": "created",
    "updated_at": "updated",
    "conversation_key": "conversation",
    "cosine": "cosine similarity",
    "keyword": "keyword score",
}
_SNAKE_CASE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+")


def label(key: Any) -> str:
    """A reported key as people read it; a key that is data (a partition like `user:ana`) stays as it is."""
    text = str(key)
    if text in LABELS:
        return LABELS[text]
    return text.replace("_", " ") if _SNAKE_CASE.fullmatch(text) else text


def when(ts: float | None) -> str:
    if ts is None:
        return "—"
    try:
        return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return str(ts)


# A page's address is its JSON route's under /ui.
def agent_path(agent: str) -> str:
    return f"/agents/{quote(agent, safe='')}"


def conversation_path(agent: str, key: str) -> str:
    return f"{agent_path(agent)}/conversations/{quote(key, safe=':')}"


def agent_href(agent: str) -> str:
    return "/ui" + agent_path(agent)


def conversation_href(agent: str, key: str) -> str:
    return "/ui" + conversation_path(agent, key)


def jobs_href(agent: str) -> str:
    return f"{agent_href(agent)}/jobs"


def job_href(agent: str, job_id: str) -> str:
    return f"{jobs_href(agent)}/{quote(job_id, safe='')}"


def memory_href(agent: str, key: str, name: str, user: str | None) -> str:
    href = f"{conversation_href(agent, key)}/memories/{quote(name, safe='')}"
    return href + (f"?{urlencode({'user': user})}" if user else "")


def media_href(agent: str, key: str, sha256: str) -> str:
    """An image's thumbnail (agentd/http/ui/thumbs.py)."""
    return f"{conversation_href(agent, key)}/media/{sha256}"


def stand_in(part: dict[str, Any]) -> str:
    """A file's part as one line: kind, name, type, size, and its description, transcript or text."""
    return MediaPart.model_validate(part).stand_in()


def compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str, sort_keys=False)


def _is_message(value: Any) -> bool:
    return isinstance(value, dict) and "role" in value and "parts" in value


def _is_time(key: str | None, value: Any) -> bool:
    # strategies report times as epoch seconds under "at" / "*_at"
    return bool(key) and (key == "at" or str(key).endswith("_at")) and isinstance(value, int | float)


def shape(value: Any, key: str | None = None) -> str:
    """How the `value` macro shows any JSON-like value a strategy reports (messages as a chat, records as a table)."""
    if _is_time(key, value):
        return "time"
    if value is None:
        return "none"
    if isinstance(value, str):
        return "block" if "\n" in value or len(value) > 120 else "text"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, list):
        if not value:
            return "empty list"
        if all(_is_message(v) for v in value):
            return "messages"
        if all(isinstance(v, dict) for v in value):
            return "records"
        if all(isinstance(v, str | int | float) and not isinstance(v, bool) for v in value):
            return "scalars"
        return "list"
    if isinstance(value, dict):
        return "mapping" if value else "empty mapping"
    return "text"


def columns(rows: list[dict[str, Any]]) -> list[str]:
    """Every key of a list of records, in first-seen order."""
    seen: dict[str, None] = {}
    for row in rows:
        seen.update(dict.fromkeys(row))
    return list(seen)


def layer_title(layer: dict[str, Any]) -> str:
    name, kind = layer.get("layer"), layer.get("kind")
    return f"{name} ({kind})" if name and name != kind else str(kind or name or "layer")


def memory_summary(memory: dict[str, Any] | None) -> str:
    if not memory:
        return "—"
    strategy = memory.get("strategy")
    if strategy:
        text = strategy.get("kind", "?")
        if strategy.get("layers"):
            text += " (" + " + ".join(str(layer.get("kind")) for layer in strategy["layers"]) + ")"
    else:
        text = f"scope: {memory.get('scope')}"
    if memory.get("persistent"):
        text += ", persistent" + (" per user" if memory.get("persistent_scope") == "user" else "")
    return text


def run_tokens(run: dict[str, Any]) -> str:
    return f"{run['input_tokens']}{'~' if run['tokens_estimated'] else ''} / {run['output_tokens']}"


FILTERS = {
    "label": label,
    "when": when,
    "compact_json": compact_json,
    "shape": shape,
    "columns": columns,
    "layer_title": layer_title,
    "memory_summary": memory_summary,
    "run_tokens": run_tokens,
    "stand_in": stand_in,
}
GLOBALS = {
    "agent_href": agent_href,
    "conversation_href": conversation_href,
    "memory_href": memory_href,
    "media_href": media_href,
    "jobs_href": jobs_href,
    "job_href": job_href,
}
