"""`usage` of the OpenAI-compatible endpoint: the tokens of the run that answered, from its run record.

OpenAI's clients read `usage` on every non-streamed completion (simonw's `llm --no-stream` fails without
it; LangChain and the Agents SDK count zero tokens) and, when `stream_options.include_usage` is set, from
a last chunk with empty `choices`. agentd already records each run's tokens, and whether they are
estimated (a provider that reports none, the offline model): those are the figures given, the estimate
flagged in the `x-agentd-usage-estimated: true` header (streamed, in the usage chunk's own `estimated`,
since a stream's headers leave before the model has answered). A reply without a model run (a command, a
duplicate) has zero tokens; one whose run cannot be read is estimated from the texts.

Its own module beside openai_api.py so that the endpoint's rules and its accounting read apart.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, Field

from agentd.engine.agent import Agent
from agentd.events import Reply
from agentd.messages import estimate_tokens

USAGE_ESTIMATED_HEADER = "x-agentd-usage-estimated"
UsageChunk = Callable[[Reply], Awaitable[dict[str, Any]]]  # a stream's last chunk's `usage`, for a reply
RUNS_SEARCHED = 50  # the newest runs of the conversation among which the reply's run is looked for


class UsageOut(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class Usage(BaseModel):
    """The run's figures, and whether they are agentd's estimate rather than the provider's count."""

    tokens: UsageOut
    estimated: bool = Field(description="the counts are estimated (about four characters a token)")

    def headers(self) -> dict[str, str]:
        return {USAGE_ESTIMATED_HEADER: "true"} if self.estimated else {}

    def streamed(self) -> dict[str, Any]:
        """The usage chunk's `usage`: OpenAI's three counts, and `estimated` (no header can say it)."""
        return {**self.tokens.model_dump(), "estimated": self.estimated}


def _usage(prompt: int, completion: int, estimated: bool) -> Usage:
    return Usage(
        tokens=UsageOut(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion),
        estimated=estimated,
    )


async def usage_of(agent: Agent, reply: Reply, prompt_text: str) -> Usage:
    """The tokens of the run that gave `reply` (its record is committed before the reply returns)."""
    if reply.run_id is None:
        return _usage(0, 0, False)  # answered without a model call (a duplicate delivery)
    runs = await agent.runs(reply.conversation_key, RUNS_SEARCHED)
    run = next((r for r in runs if r["id"] == reply.run_id), None)
    if run is None:
        return _usage(estimate_tokens(len(prompt_text)), estimate_tokens(len(reply.text)), True)
    return _usage(run["input_tokens"], run["output_tokens"], bool(run["tokens_estimated"]))


def stream_usage(agent: Agent, wanted: bool, prompt_text: str) -> UsageChunk | None:
    """What a stream's usage chunk says, when `stream_options.include_usage` asked for one."""
    if not wanted:
        return None

    async def usage(reply: Reply) -> dict[str, Any]:
        return (await usage_of(agent, reply, prompt_text)).streamed()

    return usage
