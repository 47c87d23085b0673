"""MCP sampling under the budgets of whom the tool call serves (issue 22: "under the agent's budget"):
server-everything's sampling request is charged to the person whose turn called the tool, and a budget
that is reached refuses it with the spec's rejection (-1), audited, and no model is called."""

from __future__ import annotations

import httpx
import mcp_types as types

from agentd.config.budgets import BudgetSpec
from agentd.engine.mcp_sampling import McpSampling
from agentd.engine.metering import Meter, Served, budget_id, period_of
from agentd.store.budget_queries import SpendOf, UsageRows
from agentd.tools.base import ToolCall
from testkit.fake_llm import FakeLLM
from tests.support import Harness, say
from tests.tools.reference import everything, needs_node
from tests.tools.support import agent_yaml, openai, tool_agent, tool_events

pytestmark = needs_node
SAMPLE = "everything__trigger-sampling-request"


async def test_sampling_is_charged_to_the_person_the_tool_call_serves(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient
) -> None:
    servers = {"everything": everything(sampling=True, sampling_model="fake/gpt-small")}
    agent = await tool_agent(harness, openai(fake, client), agent_yaml(servers))
    spec = BudgetSpec(per="person", limit="1M tokens/day")
    agent.state.resources.meter = Meter(agent.state.store, [spec])
    fake.reply(tool_calls=[(SAMPLE, {"prompt": "a haiku", "maxTokens": 50})])
    fake.reply("Autumn moon rises")  # the sampling call
    fake.reply("The server got its haiku.")
    assert (await say(agent, user="ana")("have the server write a haiku")).text == "The server got its haiku."
    rows = await agent.state.store.read(UsageRows("2000-01-01", "2100-01-01"))
    [sampled] = [r for r in rows if r.trigger == "sampling"]
    assert sampled.who == "webhook:ana" and sampled.channel == "webhook" and sampled.calls == 1
    period, _ = period_of(spec, agent.state.resources.meter.clock.time())
    [used] = await agent.state.store.read(SpendOf([(budget_id(spec), "webhook:ana", period)]))
    assert used == sum(r.input_tokens + r.output_tokens for r in rows), "the sampling call is on her counter"


async def test_a_budget_that_is_reached_refuses_the_sampling_request_with_the_specs_rejection(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient
) -> None:
    servers = {"everything": everything(sampling=True, sampling_model="fake/gpt-small")}
    agent = await tool_agent(harness, openai(fake, client), agent_yaml(servers))
    # the turn's first call is admitted (nothing spent yet) and spends past the limit
    agent.state.resources.meter = Meter(agent.state.store, [BudgetSpec(per="person", limit="1 tokens/day")])
    fake.reply(tool_calls=[(SAMPLE, {"prompt": "a haiku", "maxTokens": 50})])
    reply = await say(agent, user="ana")("have the server write a haiku")
    assert len(fake.requests) == 1, "neither the sampling call nor the turn's next one reached the model"
    assert reply.error == "budget"
    events = await tool_events(agent)
    [(_, refused)] = [(a, d) for a, d in events if a == "sampling_refused"]
    assert refused["server"] == "everything" and refused["user"] == "webhook:ana"
    assert refused["per"] == "person" and refused["limit"] == "1 tokens/day"
    # what the server is answered: the spec's rejection, saying which limit
    caller = ToolCall("webhook:c1", "r1", "ana", charged_to=Served("webhook:ana", "webhook"))
    asked = types.CreateMessageRequestParams(
        messages=[types.SamplingMessage(role="user", content=types.TextContent(type="text", text="hi"))],
        max_tokens=10,
    )
    answer = await McpSampling(agent.state).sample("everything", caller, asked)
    assert isinstance(answer, types.ErrorData) and answer.code == -1
    assert answer.message.startswith("User rejected sampling request: Today's limit of 1 tokens")
    rows = await agent.state.store.read(UsageRows("2000-01-01", "2100-01-01"))
    assert [r.trigger for r in rows] == ["message"], "the refused request cost nothing"
