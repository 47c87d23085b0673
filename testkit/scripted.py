"""An in-process provider you enqueue replies into (for unit tests and benchmarks).

Tests that need the wire use testkit.fake_llm.FakeLLM over HTTP instead.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from agentd.errors import ProviderError
from agentd.messages import Message, ToolCallPart
from agentd.providers.base import Completion, CompletionRequest, Usage


class ScriptedProvider:
    def __init__(self, name: str = "scripted"):
        self.name = name
        self.requests: list[CompletionRequest] = []
        self._script: deque[Completion | BaseException] = deque()

    def reply(self, text: str, usage: tuple[int, int] | None = (10, 5)) -> ScriptedProvider:
        self._script.append(Completion(Message.assistant(text), _usage(usage), "stop"))
        return self

    def call(self, name: str, usage: tuple[int, int] | None = (10, 5), **arguments: Any) -> ScriptedProvider:
        part = ToolCallPart(id=f"call_{len(self._script)}_{name}", name=name, arguments=arguments)
        self._script.append(Completion(Message(role="assistant", parts=(part,)), _usage(usage), "tool_calls"))
        return self

    def fail(
        self, message: str = "HTTP 500", status: int | None = 500, unreachable: bool = False
    ) -> ScriptedProvider:
        self._script.append(
            ProviderError(message, provider=self.name, model="m", status=status, unreachable=unreachable)
        )
        return self

    async def complete(self, request: CompletionRequest) -> Completion:
        self.requests.append(request)
        if not self._script:
            return Completion(
                Message.assistant(f"default reply to: {request.messages[-1].text}"), Usage(10, 5)
            )
        item = self._script.popleft()
        if isinstance(item, BaseException):
            raise item
        return item


def _usage(usage: tuple[int, int] | None) -> Usage | None:
    return None if usage is None else Usage(*usage)
