"""The next prompt of a conversation: one function, for the turn, the HTTP API and the inspector.

What the model sees: the purpose, the memory's sections and the persistent
memory's keys as the system prompt; the memory's history; the tools of the
definition and of the memory. The offline model reads the same facts as hints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from agentd.engine.conversation import Conversation
from agentd.memory.base import TurnInput
from agentd.memory.persistent import memory_preamble
from agentd.messages import MessageSequence
from agentd.providers.base import PromptHints, ToolSpec
from agentd.tools.base import Tool
from agentd.tools.policy import Policy


@dataclass(frozen=True, slots=True)
class Prompt:
    system: str
    history: MessageSequence  # replayed before the new message
    history_chars: int
    tools: Mapping[str, Tool]  # offered to the model: what the policy does not deny
    hints: PromptHints
    notes: Sequence[str]  # said once in the run log
    known: Mapping[str, Tool]  # every tool of the agent, offered or not: a call to a denied one is refused

    @property
    def tool_specs(self) -> list[ToolSpec]:
        return [t.spec for t in self.tools.values()]

    def fixed_chars(self) -> int:
        """Characters of the system prompt and tool definitions: the base of token estimates."""
        return len(self.system) + sum(
            len(t.name) + len(t.description) + len(str(t.parameters)) for t in self.tool_specs
        )


def build_system(purpose: str, sections: Sequence[str]) -> str:
    return "\n\n".join(s for s in (purpose.strip(), *sections) if s)


async def build_prompt(conv: Conversation, turn: TurnInput) -> Prompt:
    """The prompt for `turn` (its text is what recall searches with; empty: nothing is recalled)."""
    state, spec, memory, thread, ctx = conv.agent, conv.spec, conv.memory, conv.thread, conv.ctx
    view = await memory.strategy.view(ctx, thread, turn)
    sections = list(view.system_sections)
    hints = view.hints
    if spec.memory.persistent:
        keys = state.memory_keys(spec, turn.conversation_key, turn.user_id, turn.linked)
        sections.append(memory_preamble(keys))
        hints = replace(hints, memory_keys=tuple(keys))
    if spec.schedule is not None and spec.schedule.from_chat:
        sections.append(await state.jobs.prompt_section(turn.conversation_key))
    await state.tool_servers.wait_started()  # servers still connecting: their tools belong in this prompt
    known = {
        t.spec.name: t
        for t in (*state.tools(spec), *(memory.tools.tools(ctx, thread, turn) if memory.tools else ()))
    }
    policy = Policy.of(spec)
    offered = {name: t for name, t in known.items() if policy.ruling(t).offered}
    history = view.messages
    if not isinstance(history, MessageSequence):
        history = MessageSequence(list(history))
    return Prompt(
        system=build_system(spec.purpose, sections),
        history=history,
        history_chars=view.chars if view.chars is not None else sum(m.char_count() for m in history),
        tools=offered,
        hints=hints,
        notes=view.notes,
        known=known,
    )
