"""An MCP server's `sampling/createMessage`, answered by the agent's model: a run of its own, audited.

Off unless the file says `tools.mcp.<server>.sampling: true` (the client
then declares the capability; otherwise the server is told it cannot). The
model is the server's `sampling_model`, else `model.small`, else the agent's
model, with its fallback chain. The run (`trigger: sampling`) belongs to the
conversation and names as parent the run whose tool call the server was
serving, when one call was in flight on it; its model call is counted like
any. Every request is an audit event `{kind: tool, action: sampled |
sampling_failed | sampling_refused, server, model, user, input_tokens,
output_tokens}` (never the text).

The call is charged to, and refused by, the budgets of the person and agent
the tool call serves (its `charged_to`: the server's request arrives on the
server's own task, which serves nobody in particular). A budget that refuses
it answers the server with the spec's rejection, code -1 ("User rejected
sampling request"), saying which limit, and no model is called. Text is all that is passed each way: an image or audio part of the
server's messages is said as a placeholder, and tools offered in the request
are not (sampling here writes text, it does not call tools).
"""

from __future__ import annotations

import logging
import time

import mcp_types as types

from agentd.engine.context import CompletionLimits
from agentd.engine.metering import SERVED, BudgetExceeded, Served
from agentd.engine.state import AgentState
from agentd.errors import OperatorError, ProviderError
from agentd.messages import Message
from agentd.store.records import AuditRecord
from agentd.store.writes import AppendAudit, InsertRun
from agentd.tools.base import ToolCall

log = logging.getLogger(__name__)
TRIGGER = "sampling"
REJECTED = -1  # the MCP spec's error for a sampling request the client declines


class McpSampling:
    def __init__(self, state: AgentState):
        self.state = state

    async def sample(
        self, server: str, asker: ToolCall | None, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult | types.ErrorData:
        spec = self.state.spec
        server_spec = spec.tools.mcp.get(server)
        if server_spec is None or not server_spec.sampling:
            return types.ErrorData(code=types.INVALID_REQUEST, message="sampling is off for this server")
        model_ref = server_spec.sampling_model or spec.model.small or spec.model.name
        key = asker.conversation_key if asker is not None else None
        limits = CompletionLimits(params.temperature, params.max_tokens, tuple(params.stop_sequences or ()))
        audit = {"server": server, "model": model_ref, "user": asker.user_id if asker else None}
        served = asker.charged_to if asker is not None else None
        charged = SERVED.set(served if isinstance(served, Served) else None)
        try:
            call = await self.state.context.call_model(
                trigger=TRIGGER,
                model_ref=model_ref,
                system=params.system_prompt or "",
                messages=[_message(m) for m in params.messages],
                conversation_key=key,
                parent_run_id=asker.run_id if asker is not None else None,
                limits=limits,
            )
        except (ProviderError, OperatorError) as e:
            # the failed run is written by call_model; the audit says which server asked
            await self._audit("sampling_failed", key, None, {**audit, "error": str(e)})
            log.warning("agent %s: sampling for MCP server %s failed: %s", spec.name, server, e)
            return types.ErrorData(code=types.INTERNAL_ERROR, message=f"the model could not answer: {e}")
        except BudgetExceeded as e:
            await self._audit("sampling_refused", key, None, {**audit, **e.audit_data()})
            return types.ErrorData(code=REJECTED, message=f"User rejected sampling request: {e.reply}")
        finally:
            SERVED.reset(charged)
        run = call.run
        await self.state.store.write(InsertRun(run))
        tokens = {"input_tokens": run.input_tokens, "output_tokens": run.output_tokens}
        await self._audit("sampled", key, run.id, {**audit, "model": run.model, **tokens})
        stop = call.completion.stop_reason
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=call.completion.message.text),
            model=run.model or model_ref,
            stop_reason="maxTokens" if stop in ("length", "max_tokens") else "endTurn",
        )

    async def _audit(self, action: str, key: str | None, run_id: str | None, data: dict[str, object]) -> None:
        record = AuditRecord("tool", action, key, run_id, data)
        await self.state.store.write(AppendAudit(self.state.name, [record], time.time()))


def _message(message: types.SamplingMessage) -> Message:
    blocks = message.content if isinstance(message.content, list) else [message.content]
    text = "\n".join(_text(block) for block in blocks)
    return Message.user(text) if message.role == "user" else Message.assistant(text)


def _text(block: object) -> str:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent | types.AudioContent):
        kind = "image" if isinstance(block, types.ImageContent) else "audio"
        return f"[{kind} {block.mime_type}: not shown]"
    return f"[{getattr(block, 'type', 'content')}: not shown]"
