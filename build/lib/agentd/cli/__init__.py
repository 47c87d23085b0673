"""The `agentd` command: thin — parse, call, print."""

from agentd.cli.main import main, schema_text

__all__ = ["main", "schema_text"]
