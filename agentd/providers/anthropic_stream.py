"""A streamed Messages API answer, put back together.

The events of `stream: true`: `message_start` (the message, with the input
usage), per content block a `content_block_start`, `content_block_delta`s
(`text_delta` text; `input_json_delta` pieces of a tool call's JSON input) and
a `content_block_stop`, then `message_delta` (stop reason, output usage) and
`message_stop`; `ping`s anywhere, and `error` when the server fails mid-answer.
The assembly yields the text as it comes and, at the end, the body a
non-streamed call would have returned, so both paths read it with the same code.
"""

from __future__ import annotations

import json
from typing import Any

from agentd.errors import OVERLOADED, SERVER_ERROR
from agentd.providers.sse import ServerSentEvent
from agentd.providers.streaming import StreamProblem


class EventAssembly:
    def __init__(self) -> None:
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}  # tool_use blocks: the pieces of their input
        self._usage: dict[str, Any] = {}
        self._stop: str | None = None
        self.done = self.complete = False  # message_stop arrived: the answer is whole

    def feed(self, event: ServerSentEvent) -> str:
        """Take one event; the text it adds ("" when none)."""
        kind = event.event
        if kind == "ping":
            return ""
        data = json.loads(event.data)
        if not isinstance(data, dict):
            raise StreamProblem(f"a {kind} event whose data is not a JSON object")
        if kind == "error":
            error = data.get("error")
            said = error.get("message") if isinstance(error, dict) else error
            error_type = error.get("type") if isinstance(error, dict) else None
            raise StreamProblem(
                f"the server reported an error mid-answer: {said!r:.300}",
                OVERLOADED if error_type == "overloaded_error" else SERVER_ERROR,
            )
        if kind == "message_start":
            usage = (data.get("message") or {}).get("usage")
            if isinstance(usage, dict):
                self._usage.update(usage)
        elif kind == "content_block_start":
            block = data.get("content_block")
            if not isinstance(block, dict):
                raise StreamProblem("content_block_start without a content_block")
            self._blocks[self._index(data)] = dict(block)
            if block.get("type") == "tool_use":
                self._json[self._index(data)] = []
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                return str(block["text"])
        elif kind == "content_block_delta":
            return self._delta(self._index(data), data.get("delta"))
        elif kind == "content_block_stop":
            self._close_block(self._index(data))
        elif kind == "message_delta":
            stop = (data.get("delta") or {}).get("stop_reason")
            if isinstance(stop, str):
                self._stop = stop
            if isinstance(data.get("usage"), dict):
                self._usage.update(data["usage"])  # cumulative counts: the last one wins
        elif kind == "message_stop":
            self.done = self.complete = True
        return ""

    def _index(self, data: dict[str, Any]) -> int:
        index = data.get("index")
        if not isinstance(index, int):
            raise StreamProblem(f"a content block event without an index: {data!r:.200}")
        return index

    def _delta(self, index: int, delta: Any) -> str:
        block = self._blocks.get(index)
        if block is None or not isinstance(delta, dict):
            raise StreamProblem(f"a delta for content block {index}, which never started")
        if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
            block["text"] = block.get("text", "") + delta["text"]
            return str(delta["text"])
        if delta.get("type") == "input_json_delta" and index in self._json:
            self._json[index].append(str(delta.get("partial_json", "")))
            return ""
        raise StreamProblem(
            f"a {delta.get('type')!r} delta agentd does not know, in a {block.get('type')!r} block"
        )

    def _close_block(self, index: int) -> None:
        pieces = self._json.pop(index, None)
        if pieces is None:
            return
        raw = "".join(pieces)
        try:
            arguments = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as exc:
            name = self._blocks[index].get("name")
            raise StreamProblem(f"malformed tool call input for {name!r} ({exc}): {raw[:200]!r}") from None
        self._blocks[index]["input"] = arguments

    def body(self) -> dict[str, Any]:
        """The answer as a non-streamed Messages API body."""
        return {
            "content": [self._blocks[i] for i in sorted(self._blocks)],
            "stop_reason": self._stop,
            "usage": self._usage or None,
        }
