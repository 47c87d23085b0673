"""An approval asked for by a person with linked accounts: "the person who asked" may answer it from any
of the accounts linked into them when it was asked (here: asked on the webhook, approved from Slack);
an account of nobody, or one linked only after the request, is refused and audited."""

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
    await people.link("ana", ["webhook:ana", "slack:U0ANA"], "test", "test")

    script_write(fake, "Saved, as Ana approved.")
    asked = await say(agent, user="ana")("save a note")
    approval = approval_id(asked)
    assert "only the person who asked can answer" in asked.text
    record = await agent.state.store.read(ApprovalById(approval))
    assert record is not None and record.approvers == ["webhook:ana", "slack:U0ANA"]

    # bob is nobody's account; eve is linked into Ana only after the request: neither may answer
    await people.link("ana", ["discord:eve"], "test", "test")
    for channel, user in (("slack", "U0BOB"), ("discord", "eve")):
        event = InboundEvent(
            agent.name, f"{channel}:dm:{user}", f"/approve {approval}", channel, user_id=user
        )
        refused = await agent.handle(event)
        assert refused.text.startswith(f"You cannot answer approval [{approval}]"), refused.text
    assert not (root / "note.txt").exists()

    # Ana in her Slack direct message: her answer resumes the run asked for on the webhook
    answer = InboundEvent(agent.name, "slack:D0ANA", f"/approve {approval}", "slack", user_id="U0ANA")
    approved = await agent.handle(answer)
    assert approved.text.startswith(f"Approved [{approval}] (files__write_file in webhook:c1).")
    assert approved.text.endswith("Saved, as Ana approved.")
    assert (root / "note.txt").read_text() == "hello"
    decided = await agent.state.store.read(ApprovalById(approval))
    assert decided is not None and decided.status == "approved" and decided.decided_by == "slack:U0ANA"
    denials = await agent.state.store.read(AuditEvents(agent.name, "permission", None, 10))
    assert [(e["action"], e["data"]["by"]) for e in denials] == [
        ("denied", "slack:U0BOB"),
        ("denied", "discord:eve"),
    ]
