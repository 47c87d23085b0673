"""`/model`: the conversation's model, and switching it among the agent file's `models_allowed`.

The choice is the conversation's (stored, so it survives a restart; audited with the command's
run) and applies from its next turn (agentd.engine.state.AgentState.switched): the chosen model
first, the file's model and fallbacks behind it. `/model default` goes back to the file's model.
An agent whose file allows no other model refuses the switch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from agentd.engine.conversation import Conversation
from agentd.store.writes import SetConversationModel, Write

DEFAULT = "default"


@dataclass
class ModelAnswer:
    text: str
    data: dict[str, Any]
    effects: list[Write[Any]] = field(default_factory=list)
    chosen: str | None = None  # the conversation's new choice, once committed
    switched: bool = False


def model_answer(conv: Conversation, asked: str | None) -> ModelAnswer:
    """What `/model [asked]` answers and changes in `conv`."""
    own, current = conv.agent.spec.model.name, conv.spec.model.name
    allowed = list(conv.spec.models_allowed)
    choices = ", ".join([own, *(m for m in allowed if m != own)])
    if not asked:
        text = f"Model: {current}" + (
            f" (chosen for this conversation; the agent's is {own})" if current != own else ""
        )
        if allowed:
            text += f"\nAllowed: {choices} (/model <name> switches; /model {DEFAULT} goes back)"
        else:
            text += "\nThis agent allows no other model (its file lists no models_allowed)."
        return ModelAnswer(text, {"result": "shown", "model": current})
    if not allowed:
        return ModelAnswer(
            f"Refused: this agent allows no other model (its file lists no models_allowed). Model: {current}",
            {"result": "refused", "asked": asked, "model": current},
        )
    target = own if asked == DEFAULT else asked
    if target != own and target not in allowed:
        return ModelAnswer(
            f"Refused: {asked} is not among this agent's models ({choices}). Model: {current}",
            {"result": "refused", "asked": asked, "model": current},
        )
    if target == current:
        return ModelAnswer(f"Model: {current} already.", {"result": "unchanged", "model": current})
    chosen = None if target == own else target
    return ModelAnswer(
        f"Model for this conversation: {target} (was {current}).",
        {"result": "switched", "from": current, "to": target},
        [SetConversationModel(conv.key, chosen, time.time())],
        chosen,
        switched=True,
    )
