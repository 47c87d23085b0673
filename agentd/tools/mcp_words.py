"""How MCP happenings read in agentd's messages: why a connection failed, how far a call is."""

from __future__ import annotations

from mcp.shared.exceptions import MCPError


def progress_text(tool: str, progress: float, total: float | None, message: str | None) -> str:
    """A progress notification in words: `tool: 3/10 (reading files)`."""
    done = f"{progress:g}/{total:g}" if total else f"{progress:g}"
    return f"{tool}: {done}" + (f" ({message})" if message else "")


def describe_failure(e: BaseException) -> str:
    if isinstance(e, BaseExceptionGroup):
        inner = e.exceptions[0] if e.exceptions else e
        return describe_failure(inner)
    if isinstance(e, TimeoutError):
        return "no answer while connecting"
    text = str(e) or type(e).__name__
    return f"{type(e).__name__}: {text}" if not isinstance(e, MCPError) else text
