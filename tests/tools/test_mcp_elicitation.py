"""A server asking the person for input mid-call (server-everything's elicitation tool): the question
reaches the person who asked in their conversation, their `/answer` or `/decline` goes back to the
server out of band (the run waits on the call), only they can answer, an unanswered one expires, and
each step is audited without what was answered."""

from __future__ import annotations

import asyncio
import json
import re

import httpx

from agentd.engine.agent import Agent
from agentd.engine.elicitations import Elicitations
from agentd.events import InboundEvent, Reply
from testkit.clock import ManualClock
from testkit.fake_llm import FakeLLM
from testkit.sinks import Heard
from testkit.waiting import wait_until
from tests.support import Harness, say
from tests.tools.reference import everything, needs_node
from tests.tools.support import agent_yaml, openai, tool_agent, tool_events, tool_results

pytestmark = needs_node
ASK = "everything__trigger-elicitation-request"


async def asked(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient
) -> tuple[Agent, Heard, asyncio.Task[Reply], str]:
    """An agent whose turn called the elicitation tool; the question as the person's stream heard it."""
    agent = await tool_agent(harness, openai(fake, client), agent_yaml({"everything": everything()}))
    fake.reply(tool_calls=[(ASK, {})])
    fake.reply("Thanks, noted.")
    heard = Heard()
    event = InboundEvent(agent.name, "webhook:c1", "sign me up", "webhook", user_id="ana")
    turn = asyncio.create_task(agent.handle(event, sink=heard))
    [question] = await wait_until(lambda: heard.progress_heard, "the server's question")
    match = re.search(r"asks \[([0-9a-f]{6})\]: Please provide inputs for the following fields:", question)
    assert match, question
    assert f"/decline {match.group(1)}" in question and "name (string)" in question
    return agent, heard, turn, match.group(1)


async def test_the_persons_answer_reaches_the_server_and_only_they_can_answer(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient
) -> None:
    agent, _, turn, qid = await asked(harness, fake, client)
    answer = json.dumps({"name": "Ana Lima", "check": "yes", "integer": "7"})
    refused = await say(agent, user="bob")(f"/answer {qid} {answer}")
    assert refused.text.startswith(f"No question [{qid}] waits for you") and not turn.done()
    [denied] = await agent.audit_events(kind="permission")
    assert (denied["action"], denied["data"]["by"], denied["data"]["question"]) == ("denied", "bob", qid)
    sent = await say(agent, user="ana")(f"/answer {qid} {answer}")
    assert sent.text == f"Sent your answer to everything [{qid}]."
    reply = await turn
    assert reply.text == "Thanks, noted."
    [result] = tool_results(fake.requests[1].json)
    assert "- Name: Ana Lima" in result and "Agreed to terms: true" in result
    events = [(action, data) for action, data in await tool_events(agent) if "elicitation" in action]
    assert [action for action, _ in events] == ["elicitation_requested", "elicitation_answered"]
    assert (
        events[0][1]["server"] == "everything" and events[0][1]["user"] == "ana" and events[0][1]["id"] == qid
    )
    assert "Ana Lima" not in json.dumps(events), "what the person answered is not audited"


async def test_a_declined_question_is_told_to_the_server(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient
) -> None:
    agent, _, turn, qid = await asked(harness, fake, client)
    assert (await say(agent, user="ana")(f"/decline {qid}")).text.startswith(f"Declined [{qid}]")
    await turn
    [result] = tool_results(fake.requests[1].json)
    assert "decline" in result.lower()
    assert [a for a, _ in await tool_events(agent) if "elicitation" in a][-1] == "elicitation_declined"


async def test_an_unanswered_question_expires_as_cancelled(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient
) -> None:
    clock = ManualClock()
    agent = await tool_agent(harness, openai(fake, client), agent_yaml({"everything": everything()}))
    elicitations = agent.state.tool_servers.elicitor
    assert isinstance(elicitations, Elicitations)
    elicitations.clock = clock
    fake.reply(tool_calls=[(ASK, {})])
    fake.reply("Nobody answered.")
    heard = Heard()
    event = InboundEvent(agent.name, "webhook:c1", "sign me up", "webhook", user_id="ana")
    turn = asyncio.create_task(agent.handle(event, sink=heard))
    await wait_until(lambda: heard.progress_heard and clock.sleepers, "the question to wait")
    clock.advance(600)  # tools.approval_timeout_s
    await turn
    [result] = tool_results(fake.requests[1].json)
    assert "cancel" in result.lower()
    assert [a for a, _ in await tool_events(agent) if "elicitation" in a] == [
        "elicitation_requested",
        "elicitation_expired",
    ]


async def test_a_question_that_cannot_be_put_down_to_one_call_is_refused(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient
) -> None:
    agent = await tool_agent(harness, openai(fake, client), agent_yaml({"everything": everything()}))
    server = agent.state.tool_servers.servers["everything"]
    # one conversation's long call is in flight on the server when another's asks the person
    fake.reply(tool_calls=[("everything__trigger-long-running-operation", {"duration": 3, "steps": 1})])
    first = asyncio.create_task(say(agent, "webhook:a", user="ana")("run the long one"))
    await wait_until(lambda: len(server.callbacks.asking) == 1, "the long call to be in flight")
    fake.reply(tool_calls=[(ASK, {})])
    fake.reply("Could not ask.")
    heard = Heard()
    event = InboundEvent(agent.name, "webhook:b", "sign me up", "webhook", user_id="bob")
    assert (await agent.handle(event, sink=heard)).text == "Could not ask."
    assert heard.progress_heard == []  # nobody was asked
    assert "cancel" in tool_results(fake.requests[2].json)[0].lower()
    fake.reply("Long one done.")
    assert (await first).text == "Long one done."
    [(_, refused)] = [(a, d) for a, d in await tool_events(agent) if a == "elicitation_refused"]
    assert refused["reason"] == "not one call in flight" and refused["server"] == "everything"
