"""`/link`, `/link <code>`, `/unlink` and `/whoami`: a person joins their accounts from the chats.

A code is given only in a direct conversation with the agent: shown in a group, anyone there could
send it from their own account and be linked into this person (reading their memories).
"""

from __future__ import annotations

from agentd.engine.command_result import CommandResult
from agentd.engine.conversation import Conversation
from agentd.engine.linking import CODE_TTL_S, LinkRefused
from agentd.events import InboundEvent

NO_ACCOUNT = "This conversation has no account I can link (no user id came with the message)."


def is_direct(event: InboundEvent) -> bool:
    """Whether only the sender sees this conversation's replies, as far as the channel tells."""
    if event.channel == "telegram":
        return str(event.metadata.get("chat_id")) == event.user_id  # a private chat's id is the user's
    if event.channel == "slack":
        return str(event.metadata.get("channel", "")).startswith("D")  # a direct message's channel id
    if event.channel == "discord":
        return ":dm:" in event.conversation_key
    return True  # the webhook, the OpenAI endpoint, the terminal: one caller's own conversation


def _argument(event: InboundEvent) -> str:
    parts = event.text.strip().split(maxsplit=1)
    return parts[1].strip() if len(parts) > 1 else ""


async def link(conv: Conversation, event: InboundEvent) -> CommandResult:
    people, account = conv.agent.resources.people, event.account
    if account is None:
        return CommandResult(NO_ACCOUNT, "link", {"result": "no_account"})
    code = _argument(event)
    try:
        if not code:
            if not is_direct(event):
                return CommandResult(
                    "Send /link in a direct message with me: a code shown here could be used by anyone "
                    "who sees it.",
                    "link",
                    {"result": "not_direct"},
                )
            issued = await people.issue_code(account)
            minutes = round(CODE_TTL_S / 60)
            return CommandResult(
                f"Your link code is {issued}. Within {minutes} minutes, send /link {issued} from your "
                "other account (on any channel) to make the two one person. It works once.",
                "link",
                {"result": "code"},
            )
        linked = await people.redeem(code, account)
    except LinkRefused as e:
        return CommandResult(str(e), "link", {"result": "refused"})
    others = [a for a in linked.accounts if a != account]
    return CommandResult(
        f"Linked: you are one person with {', '.join(others)}. What you told me there I know here too.",
        "link",
        {"result": "linked"},
    )


async def unlink(conv: Conversation, event: InboundEvent) -> CommandResult:
    people, account = conv.agent.resources.people, event.account
    if account is None:
        return CommandResult(NO_ACCOUNT, "unlink", {"result": "no_account"})
    try:
        await people.unlink(account, "command", account)
    except LinkRefused as e:
        return CommandResult(str(e), "unlink", {"result": "refused"})
    return CommandResult(
        "Unlinked: this account is on its own again. It keeps what it had before linking and what was "
        "said from it since; what your other accounts said stays with them.",
        "unlink",
        {"result": "unlinked"},
    )


async def whoami(conv: Conversation, event: InboundEvent) -> CommandResult:
    account = event.account
    if account is None:
        return CommandResult(NO_ACCOUNT, "whoami", {"result": "no_account"})
    linked = await conv.agent.resources.people.of(account)
    if linked is None:
        text = f"You are {account}, linked to no other account (/link links one)."
    else:
        text = f"You are {linked.person}: " + ", ".join(linked.accounts) + f" (this one is {account})."
    return CommandResult(text, "whoami")
