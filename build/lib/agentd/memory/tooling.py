"""Tools the model can call: the seam lives in agentd.tools.base; memory strategies use it from here."""

from __future__ import annotations

from agentd.tools.base import Handler, Tool, ToolCall, object_schema

__all__ = ["Handler", "Tool", "ToolCall", "object_schema"]
