"""What a person approving a call and the audit trail see of its arguments: secrets redacted by their
names, but a memory's `key` (which only reads like a secret) shown, since it is what is approved."""

from __future__ import annotations

import re

from agentd.store.queries import AuditEvents
from agentd.tools.redaction import audit_args
from tests.support import Harness, say

ASKS = "memory: {scope: thread, persistent: true, writes: ask}\n"


async def test_approving_remember_shows_the_memory_key_and_never_the_value(harness: Harness) -> None:
    agent = await harness.agent(ASKS)
    asked = await say(agent, user="ana")("remember door_code: 4471-secret")
    assert re.search(r'remember \{"key": "door_code"\}', asked.text), asked.text  # not "[redacted]"
    [requested] = await agent.state.store.read(AuditEvents(kind="tool"))
    assert requested["action"] == "approval_requested"
    assert requested["data"]["args"] == {"key": "door_code"}
    assert "4471" not in str(requested) and "4471" not in asked.text


def test_names_that_say_secret_stay_redacted() -> None:
    args = {
        "key": "k-1",  # an MCP tool's `key` may be one: only a tool's own code can say it is not
        "api_key": "sk-1",
        "apiKey": "sk-2",
        "private_key": "-----BEGIN",
        "token": "t",
        "password": "p",
        "client_secret": "s",
        "Authorization": "Bearer x",
        "path": "notes.txt",
    }
    shown = audit_args(args, "redacted")
    assert shown == {**{k: "[redacted]" for k in args if k != "path"}, "path": "notes.txt"}
    # a plain argument is not judged by its name; any other still is, and the size cap holds for both
    shown = audit_args({**args, "note": "y" * 300}, "redacted", plain={"key", "note"})
    assert shown is not None and shown["key"] == "k-1" and shown["api_key"] == "[redacted]"
    assert shown["note"] == "[redacted: 300 characters]"
