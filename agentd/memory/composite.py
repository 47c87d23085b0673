"""composite — `layers: [...]` consulted and written in order (e.g. window + episodic).

Each layer is an ordinary strategy built by the registry under its own name
("0:window", "1:episodic"), so two layers never share a row in memory_state.

What the model sees:
- system sections: every layer's, in layer order;
- messages: each layer that replays history shows a suffix of the same
  thread (window: the last N; full: all; summarized: since its cursor; state:
  the last exchange), so concatenating them would repeat messages. Only the
  longest list is used — the widest view of the thread, which holds the
  others — the first such layer winning a tie; the other layers' messages are
  not added. window + summarized therefore replays the longer of the two
  tails under the summary, never a message twice.
- tools: every layer's, in order (a name offered twice keeps the first).

After a run: settle_due when any layer's is; settle runs each due layer's
settle in order, and one layer failing is logged and does not stop the
others (its work is derived from its own cursor, so it is retried next time).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from agentd.config.models import MemorySpec
from agentd.config.strategies import CompositeStrategy
from agentd.errors import ModelPaused
from agentd.memory.base import Memory, MemoryContext, MemoryView, TurnInput
from agentd.memory.registry import build_strategy
from agentd.messages import Message
from agentd.providers.base import PromptHints
from agentd.store.records import StoredThread
from agentd.tools.base import Tool

log = logging.getLogger(__name__)


def merge_views(views: Sequence[MemoryView]) -> MemoryView:
    """The layers' views as one: sections and notes in order, the longest message list alone."""
    sections = [s for v in views for s in v.system_sections]
    notes = [n for v in views for n in v.notes]
    messages: Sequence[Message] = ()
    hints = PromptHints()
    for view in views:
        hints = hints.merged(view.hints)
        if len(view.messages) > len(messages):
            messages = view.messages
    # passed on as is: a full layer's view is a snapshot over the hot thread, never copied
    return MemoryView(system_sections=sections, messages=messages, notes=notes, hints=hints)


class CompositeMemory:
    kind = "composite"

    def __init__(self, spec: CompositeStrategy, memory: MemorySpec, layer: str = "composite"):
        self.layer = layer
        self.layers: list[Memory] = [
            Memory.of(build_strategy(layer_spec, memory, f"{i}:{layer_spec.kind}"))
            for i, layer_spec in enumerate(spec.layers)
        ]

    @property
    def keeps_transcript(self) -> bool:
        return any(layer.keeps_transcript for layer in self.layers)

    async def view(self, ctx: MemoryContext, thread: StoredThread, turn: TurnInput) -> MemoryView:
        return merge_views([await layer.strategy.view(ctx, thread, turn) for layer in self.layers])

    async def tail_from(self, ctx: MemoryContext, thread: StoredThread) -> int:
        # the widest layer decides (one without ReadsTail reads everything)
        return min([await layer.tail_from(ctx, thread) for layer in self.layers])

    def tools(self, ctx: MemoryContext, thread: StoredThread, turn: TurnInput) -> Sequence[Tool]:
        tools: dict[str, Tool] = {}
        for layer in self.layers:
            for tool in layer.tools.tools(ctx, thread, turn) if layer.tools is not None else ():
                tools.setdefault(tool.spec.name, tool)
        return list(tools.values())

    def settle_due(self, thread: StoredThread) -> bool:
        return any(layer.settle_due(thread) for layer in self.layers)

    async def settle(self, ctx: MemoryContext, thread: StoredThread, run_id: str | None) -> None:
        paused: ModelPaused | None = None
        for i, layer in enumerate(self.layers):
            try:
                if layer.after_run is not None and layer.after_run.settle_due(thread):
                    await layer.after_run.settle(ctx, thread, run_id)
            except ModelPaused as e:
                # this layer waits for its model; the others (own cursors, own models) go on
                paused = e if paused is None or e.retry_in < paused.retry_in else paused
            except Exception:
                log.exception(
                    "agent %s: memory layer %s:%s failed after a run of %s; the other layers go on",
                    ctx.agent,
                    i,
                    layer.kind,
                    thread.conversation_key,
                )
        if paused is not None:
            raise paused

    async def inspect(self, ctx: MemoryContext, thread: StoredThread) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "layer": self.layer,
            "layers": [await layer.describe(ctx, thread) for layer in self.layers],
        }
