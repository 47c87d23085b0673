"""The development kit, not packaged: fake providers and platform servers on loopback, a fake MCP
server, a recording host and the PostgreSQL launcher. tests/ and bench/ import it from the repository root."""
