"""The Chat Completions parameters that change the answer: honoured, refused, or said to be ignored.

A client that sends `stop` or `max_tokens` expects an answer that obeys them; one that asks for
`logprobs` or audio output reads fields agentd never fills. So, parameter by parameter (the README's
table says the same):

- `stop` (a string or up to 4) and `max_completion_tokens` / `max_tokens` go to the agent's model for
  this turn (OpenAI's and Anthropic's APIs and the offline model all honour them; the agent file's
  `model.max_output_tokens` still caps);
- `logprobs` / `top_logprobs`, and audio output (`modalities` with "audio", `audio`) are refused with a
  400 in OpenAI's shape, naming the parameter: agentd has no log probabilities or audio to give;
- any other parameter the request carries (`temperature`, `top_p`, `seed`, ...: the agent file decides
  the model and its sampling) is accepted and listed in the `x-agentd-ignored` response header, so a
  client can tell it had no effect.

Its own module beside openai_api.py, which reads the request and answers it.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel

from agentd.engine.turn import TurnLimits
from agentd.events import Reply
from agentd.http.bodies import body_schema, sse_event_schema
from agentd.http.errors import ApiError
from agentd.http.openai_usage import USAGE_ESTIMATED_HEADER

IGNORED_HEADER = "x-agentd-ignored"
MAX_STOPS = 4  # as OpenAI's API allows
HONOURED = ("stop", "max_tokens", "max_completion_tokens")
REFUSED = ("logprobs", "top_logprobs", "modalities", "audio")
NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")  # what a header may carry of a parameter's name
MAX_LISTED = 20


def turn_limits(extra: dict[str, Any]) -> TurnLimits:
    """`stop` and the output limit of a request's parameters (its fields beyond those the endpoint
    declares); raises ApiError (400) for a malformed one, or one asking what agentd cannot give."""
    _refuse(extra)
    stop = extra.get("stop")
    if stop is None:
        stops: tuple[str, ...] = ()
    elif isinstance(stop, str):
        stops = (stop,)
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop) and len(stop) <= MAX_STOPS:
        stops = tuple(stop)
    else:
        raise ApiError(400, f"stop: a string or a list of up to {MAX_STOPS} strings", param="stop")
    if any(s == "" for s in stops):
        raise ApiError(400, "stop: a stop sequence cannot be empty", param="stop")
    limit = None
    for name in ("max_completion_tokens", "max_tokens"):  # the newer name wins when both are sent
        value = extra.get(name)
        if value is None:
            continue
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # 64.0 is the integer 64 in JSON (and in the schema's "integer")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ApiError(400, f"{name}: a positive number of tokens", param=name)
        limit = value if limit is None else limit
    return TurnLimits(stop=stops, max_output_tokens=limit)


def _refuse(extra: dict[str, Any]) -> None:
    logprobs = extra.get("logprobs")
    if logprobs is not None and logprobs is not False:  # (0 == False in Python, not in JSON)
        raise ApiError(400, "logprobs: agents give no log probabilities; leave it out", param="logprobs")
    if extra.get("top_logprobs") is not None:
        raise ApiError(
            400, "top_logprobs: agents give no log probabilities; leave it out", param="top_logprobs"
        )
    modalities = extra.get("modalities")
    if extra.get("audio") is not None or (isinstance(modalities, list) and "audio" in modalities):
        raise ApiError(
            400, "modalities: agents answer in text only; leave out audio output", param="modalities"
        )
    if modalities is not None and modalities != ["text"]:
        raise ApiError(400, 'modalities: only ["text"]', param="modalities")


def finish_reason(reply: Reply) -> str:
    """OpenAI's `finish_reason`: "length" when the model stopped at the output limit (max_tokens)."""
    return "length" if reply.cut_short else "stop"


# The parameters above as the request's schema says them (ChatCompletionIn takes them as extra fields,
# which turn_limits reads): exactly what is accepted, so a value the schema allows is never refused.
REQUEST_PROPERTIES: dict[str, Any] = {
    "stop": {
        "anyOf": [
            {"type": "string", "minLength": 1},
            {"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": MAX_STOPS},
            {"type": "null"},
        ],
        "description": "passed to the agent's model for this turn",
    },
    **{
        name: {
            "type": ["integer", "null"],
            "minimum": 1,
            "description": "passed to the agent's model for this turn (the agent file's limit still caps)",
        }
        for name in ("max_completion_tokens", "max_tokens")
    },
    "logprobs": {"enum": [False, None], "description": "agents give no log probabilities: true is refused"},
    "top_logprobs": {"type": "null", "description": "refused: agents give no log probabilities"},
    "modalities": {
        "anyOf": [{"const": ["text"]}, {"type": "null"}],
        "description": "text only: audio output is refused",
    },
    "audio": {"type": "null", "description": "refused: agents answer in text"},
}


def completion_docs(
    request: type[BaseModel], conversation_header: str, conversation_doc: str
) -> dict[str, Any]:
    """The route's `openapi_extra`: its body (`request`, with the parameters above) and its stream, and
    the headers a 200 carries, so clients and validators know them: the conversation, estimated usage,
    the ignored parameters."""
    extra = body_schema(request, stream=sse_event_schema(None))
    body = extra["requestBody"]["content"]["application/json"]["schema"]
    body.setdefault("properties", {}).update(REQUEST_PROPERTIES)
    ok = extra.setdefault("responses", {}).setdefault("200", {})
    ok["headers"] = {
        conversation_header: {
            "description": conversation_doc,
            "schema": {"type": "string"},
        },
        USAGE_ESTIMATED_HEADER: {
            "description": "present when `usage` is agentd's estimate, not the provider's count",
            "schema": {"type": "string", "enum": ["true"]},
        },
        IGNORED_HEADER: {
            "description": "the request's parameters that had no effect, comma-separated",
            "schema": {"type": "string"},
        },
    }
    return extra


def ignored_headers(extra: dict[str, Any]) -> dict[str, str]:
    """`x-agentd-ignored: temperature, top_p` for the parameters that had no effect (none: no header)."""
    ignored = sorted(k for k, v in extra.items() if k not in HONOURED + REFUSED and v is not None)
    if not ignored:
        return {}
    # a name no parameter has (non-ASCII, blanks: a header cannot carry it) is counted, not written
    named = [k for k in ignored if NAME_RE.match(k)][:MAX_LISTED]
    unnamed = len(ignored) - len(named)
    return {IGNORED_HEADER: ", ".join([*named, *([f"(and {unnamed} more)"] if unnamed else [])])}
