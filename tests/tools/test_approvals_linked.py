"""An approval asked for by a person with linked accounts: "the person who asked" may answer it from any
account linked into them when they answer (here: asked on the webhook, approved from Slack, or from an
account linked since); an account of nobody, or one unlinked since the request, is refused and audited."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from agentd.events import InboundEvent
from agentd.store.queries import ApprovalById, AuditEvents
from testkit.fake_llm import FakeLLM
from tests.support import Harness, say
from tests.tools.support import agent_yaml, openai, stdio_server, tool_agent
from tests.tools.test_approvals import approval_id, script_write

pytestmark = pytest.mark.both_stores


async def test_the_person_who_asked_answers_from_another_linked_account(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient, root: Path
) -> None:
    agent = await tool_agent(
        harness, openai(fake, client), agent_yaml({"files": stdio_server(root)}, ask=["files.write_file"])
    )
    people = agent.state.resources.people
    people.attach(agent.state.store)  # the daemon keeps links in its own store; one store is as good
    await people.link("ana", ["webhook:ana", "slack:U0ANA", "discord:ana"], "test", "test")

    script_write(fake, "Saved, as Ana approved.")
    asked = await say(agent, user="ana")("save a note")
    approval = approval_id(asked)
    assert "only the person who asked can answer" in asked.text
    record = await agent.state.store.read(ApprovalById(approval))
    assert record is not None and record.approvers == ["webhook:ana", "discord:ana", "slack:U0ANA"]

    # bob is nobody's account; Ana's Discord account was hers when she asked, but is unlinked since
    await people.unlink("discord:ana", "test", "test")
    for channel, user in (("slack", "U0BOB"), ("discord", "ana")):
        event = InboundEvent(
            agent.name, f"{channel}:dm:{user}", f"/approve {approval}", channel, user_id=user
        )
        refused = await agent.handle(event)
        assert refused.text == (
            f"You cannot answer approval [{approval}]: only the person who asked (webhook:ana, or an "
            "account linked to it) can."
        )
    assert not (root / "note.txt").exists()

    # Ana links her Telegram account after asking, and answers from there: the run asked for on the
    # webhook resumes (she is the person who asked, whichever of her accounts answers)
    await people.link("ana", ["telegram:42"], "test", "test")
    answer = InboundEvent(agent.name, "telegram:42", f"/approve {approval}", "telegram", user_id="42")
    approved = await agent.handle(answer)
    assert approved.text.startswith(f"Approved [{approval}] (files__write_file in webhook:c1).")
    assert approved.text.endswith("Saved, as Ana approved.")
    assert (root / "note.txt").read_text() == "hello"
    decided = await agent.state.store.read(ApprovalById(approval))
    assert decided is not None and decided.status == "approved" and decided.decided_by == "telegram:42"
    denials = await agent.state.store.read(AuditEvents(agent.name, "permission", None, 10))
    assert [(e["action"], e["data"]["by"]) for e in denials] == [
        ("denied", "slack:U0BOB"),
        ("denied", "discord:ana"),
    ]


async def test_a_linked_account_answers_from_its_own_direct_message(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient, root: Path
) -> None:
    agent = await tool_agent(
        harness, openai(fake, client), agent_yaml({"files": stdio_server(root)}, ask=["files.write_file"])
    )
    people = agent.state.resources.people
    people.attach(agent.state.store)
    await people.link("ana", ["webhook:ana", "slack:U0ANA"], "test", "test")
    script_write(fake, "Saved, as Ana approved.")
    approval = approval_id(await say(agent, user="ana")("save a note"))
    answer = InboundEvent(agent.name, "slack:D0ANA", f"/approve {approval}", "slack", user_id="U0ANA")
    approved = await agent.handle(answer)
    assert approved.text.endswith("Saved, as Ana approved.") and (root / "note.txt").exists()
