"""An agents folder: which files define agents, and checking it all as `agentd run` would load it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from agentd.config.loader import parse_agent, parse_daemon
from agentd.config.models import AgentSpec, ProviderSpec
from agentd.errors import ConfigError, ConfigProblem

DAEMON_FILE_NAME = "agentd.yaml"  # beside the agents folder, unless --config says otherwise


def agent_files(agents_dir: Path) -> list[Path]:
    return sorted(p for p in agents_dir.glob("*.yaml") if p.is_file() and not p.name.startswith("."))


@dataclass
class CheckResult:
    agents: list[AgentSpec] = field(default_factory=list)
    errors: list[ConfigError] = field(default_factory=list)


def check_agents(
    target: Path,
    daemon_file: Path | None = None,
    check_embedder: Callable[[str, Mapping[str, ProviderSpec]], object] | None = None,
) -> CheckResult:
    """Validate agentd.yaml (if any) and every agent file in the folder `target`.

    Every error is collected. Agents are parsed as `agentd run` parses them: with
    agentd.yaml's default model, and model references checked against its providers.
    """
    result = CheckResult()
    default_model, providers = None, None
    if daemon_file is not None:
        try:
            settings = parse_daemon(daemon_file, check_embedder=check_embedder)
            default_model, providers = settings.defaults.model, settings.provider_names()
        except ConfigError as e:
            result.errors.append(e)  # its providers are unknown: agents' references go unchecked
    if not target.is_dir():
        result.errors.append(
            ConfigError([ConfigProblem(str(target), None, None, "agents folder does not exist")])
        )
        return result
    for path in agent_files(target):
        try:
            result.agents.append(parse_agent(path, default_model=default_model, providers=providers))
        except ConfigError as e:
            result.errors.append(e)
        except OSError as e:
            result.errors.append(ConfigError([ConfigProblem(str(path), None, None, f"cannot read: {e}")]))
    return result
