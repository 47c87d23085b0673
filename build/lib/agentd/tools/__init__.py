"""Tools the model can call, whatever their source: the seam (base.py), names, policy, redaction,
and MCP servers reached through the official SDK (mcp_*.py)."""
