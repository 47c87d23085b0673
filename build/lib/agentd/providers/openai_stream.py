"""A streamed Chat Completions answer, put back together.

The chunks of `stream: true` carry `choices[0].delta` pieces: `content` text,
and `tool_calls` entries keyed by `index` whose first piece has the id and the
function name and whose later pieces add to the arguments string. With
`stream_options: {include_usage: true}` a last chunk with no choices carries the
usage. The assembly yields the text as it comes and, at the end, the body a
non-streamed call would have returned, so both paths read it with the same code.
"""

from __future__ import annotations

import json
from typing import Any

from agentd.providers.sse import ServerSentEvent
from agentd.providers.streaming import StreamProblem


class ChunkAssembly:
    def __init__(self) -> None:
        self._text: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._finish: str | None = None
        self._usage: Any = None
        self.done = False  # [DONE] arrived
        self.complete = False  # a finish_reason or [DONE] arrived: the answer is whole

    def feed(self, event: ServerSentEvent) -> str:
        """Take one event (a chunk, or [DONE]); the text it adds ("" when none)."""
        if event.data.strip() == "[DONE]":
            self.done = self.complete = True
            return ""
        chunk = json.loads(event.data)
        if not isinstance(chunk, dict):
            raise StreamProblem(f"a chunk that is not a JSON object: {chunk!r:.200}")
        if "error" in chunk:
            error = chunk["error"]
            said = error.get("message") if isinstance(error, dict) else error
            raise StreamProblem(f"the server reported an error mid-answer: {said!r:.300}")
        if chunk.get("usage") is not None:
            self._usage = chunk["usage"]
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise StreamProblem("`choices` is not a list")
        text = ""
        for choice in choices:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # only one choice is asked for
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                raise StreamProblem("`choices[0].delta` is not an object")
            content = delta.get("content")
            if isinstance(content, str) and content:
                text += content
            for piece in delta.get("tool_calls") or []:
                self._tool_call_piece(piece)
            if isinstance(choice.get("finish_reason"), str):
                self._finish = choice["finish_reason"]
                self.complete = True  # the usage chunk may follow
        self._text.append(text)
        return text

    def _tool_call_piece(self, piece: Any) -> None:
        if not isinstance(piece, dict) or not isinstance(piece.get("index", 0), int):
            raise StreamProblem(f"a tool call piece without an index: {piece!r:.200}")
        call = self._calls.setdefault(piece.get("index", 0), {"function": {"arguments": ""}})
        if piece.get("id"):
            call["id"] = piece["id"]
        function = piece.get("function") or {}
        if not isinstance(function, dict):
            raise StreamProblem(f"a tool call piece whose function is not an object: {piece!r:.200}")
        if isinstance(function.get("name"), str) and function["name"]:
            call["function"]["name"] = call["function"].get("name", "") + function["name"]
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            call["function"]["arguments"] += arguments
        elif isinstance(arguments, dict):  # some servers send the whole object at once
            call["function"]["arguments"] = arguments

    def body(self) -> dict[str, Any]:
        """The answer as a non-streamed Chat Completions body."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self._text) or None}
        if self._calls:
            message["tool_calls"] = [self._calls[i] for i in sorted(self._calls)]
        return {"choices": [{"message": message, "finish_reason": self._finish}], "usage": self._usage}
