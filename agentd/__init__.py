"""agentd: a daemon that hosts LLM agents defined in YAML."""
