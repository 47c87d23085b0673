"""Agents with MCP tools for the tests: the fake MCP server (the SDK's own server API) over stdio or
Streamable HTTP, and a fake OpenAI or Anthropic model on loopback that calls the tools."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from agentd.engine.agent import Agent
from agentd.providers.anthropic import AnthropicProvider
from agentd.providers.openai import OpenAIProvider
from agentd.store.queries import AuditEvents
from testkit.fake_llm import FakeLLM
from testkit.fake_mcp import stdio_command
from tests.support import Harness


def stdio_server(root: Path, **options: Any) -> dict[str, Any]:
    return {"command": stdio_command(), "env": {"ROOT": str(root)}, **options}


def agent_yaml(servers: dict[str, dict[str, Any]], **policy: Any) -> str:
    """An agent file with these MCP servers and policy keys (JSON is YAML: no quoting to think about)."""
    tools = {"mcp": servers, **policy}
    return f"purpose: You use tools.\nmodel: fake/gpt-test\nmemory: {{scope: thread}}\ntools: {json.dumps(tools)}\n"


def openai(fake: FakeLLM, client: httpx.AsyncClient) -> OpenAIProvider:
    return OpenAIProvider(name="fake", kind="openai", client=client, **_fake_endpoint(fake, "openai"))


def anthropic(fake: FakeLLM, client: httpx.AsyncClient) -> AnthropicProvider:
    return AnthropicProvider(name="fake", client=client, **_fake_endpoint(fake, "anthropic"))


def _fake_endpoint(fake: FakeLLM, api: str) -> dict[str, Any]:
    url = fake.openai_base_url if api == "openai" else fake.anthropic_base_url
    return {"base_url": url, "api_key": "sk-test", "timeout_s": 10.0, "max_retries": 0}


async def tool_agent(harness: Harness, provider: Any, yaml_text: str, wait: bool = True) -> Agent:
    agent = await harness.agent(yaml_text, providers={"fake": provider})
    if wait:
        await agent.state.tool_servers.wait_ready(20)
    return agent


async def tool_events(agent: Agent, tool: str | None = None) -> list[tuple[str, dict[str, Any]]]:
    rows = await agent.state.store.read(AuditEvents(agent.name, "tool", None, 1000, tool))
    return [(r["action"], r["data"]) for r in rows]


def offered(request_json: dict[str, Any]) -> list[str]:
    """The tool names an OpenAI-format request offered."""
    return [t["function"]["name"] for t in request_json.get("tools", [])]


def tool_results(request_json: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request_json["messages"] if m["role"] == "tool"]
