"""An agents folder: which files define agents, and checking it all as `agentd run` would load it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from agentd.config.loader import AGENT_SUFFIXES, parse_agent, parse_daemon
from agentd.config.models import AgentSpec, DaemonSpec, ProviderSpec
from agentd.errors import ConfigError, ConfigProblem

DAEMON_FILE_NAME = "agentd.yaml"  # beside the agents folder, unless --config says otherwise


def agent_files(agents_dir: Path) -> list[Path]:
    """Every agent file in the folder (`<name>.yaml` or `<name>.yml`, not hidden), sorted."""
    return sorted(
        p
        for p in agents_dir.iterdir()
        if p.suffix in AGENT_SUFFIXES and p.is_file() and not p.name.startswith(".")
    )


def agent_sources(agents_dir: Path) -> dict[str, list[Path]]:
    """Agent name -> its files; more than one file is a duplicate that parse_agent refuses."""
    sources: dict[str, list[Path]] = {}
    for path in agent_files(agents_dir):
        sources.setdefault(path.stem, []).append(path)
    return sources


def find_agent_file(agents_dir: Path, name: str) -> Path | None:
    """The file that defines agent `name`, if any (the first of two, which parse_agent then refuses)."""
    return next((p for s in AGENT_SUFFIXES if (p := agents_dir / f"{name}{s}").is_file()), None)


def agents_folder_of(target: Path) -> Path:
    """The agents folder `agentd check TARGET` is about: TARGET itself, or the folder of an agent file."""
    return target.parent if target.suffix in AGENT_SUFFIXES and not target.is_dir() else target


@dataclass
class CheckResult:
    agents: list[AgentSpec] = field(default_factory=list)
    errors: list[ConfigError] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # what `agentd run` starts with, but warns about
    settings: DaemonSpec | None = None  # agentd.yaml as parsed (None when it has errors)
    files: dict[str, Path] = field(default_factory=dict)  # agent name -> its file, for the agents parsed


def check_agents(
    target: Path,
    daemon_file: Path | None = None,
    check_embedder: Callable[[str, Mapping[str, ProviderSpec]], object] | None = None,
) -> CheckResult:
    """Validate agentd.yaml (if any) and the agents of `target` (a folder, or one agent file).

    `daemon_file` defaults to agentd.yaml beside the agents folder. Every error is
    collected. Agents are parsed as `agentd run` parses them: with agentd.yaml's
    default model, and their model references checked against its providers.
    """
    result = CheckResult()
    default_model, providers = None, None
    daemon_file = daemon_file or agents_folder_of(target).parent / DAEMON_FILE_NAME
    try:
        settings = parse_daemon(daemon_file, check_embedder=check_embedder)
        default_model, providers = settings.defaults.model, settings.provider_names()
        result.settings = settings
    except ConfigError as e:
        result.errors.append(e)  # its providers are unknown: agents' references go unchecked
    paths = _agent_paths(target, result)
    folder = agents_folder_of(target)
    known = set(agent_sources(folder)) if folder.is_dir() else {p.stem for p in paths}
    for path in paths:
        try:
            spec = parse_agent(path, default_model=default_model, providers=providers, known_agents=known)
            result.agents.append(spec)
            result.files[spec.name] = path
        except ConfigError as e:
            result.errors.append(e)
        except OSError as e:
            result.errors.append(ConfigError([ConfigProblem(str(path), None, None, f"cannot read: {e}")]))
    if result.settings is not None:
        # a provider the agents use is warned about on them (agentd/daemon/provider_checks.py), with why
        used = {
            ref.partition("/")[0]
            for spec in result.agents
            for ref in spec.model_refs(result.settings.memory_extractor_model)
        }
        result.warnings += [
            f"{spec.unavailable}: calls to provider {name} fail until it is set"
            for name, spec in result.settings.providers.items()
            if spec.unavailable and name not in used
        ]
    return result


def _agent_paths(target: Path, result: CheckResult) -> list[Path]:
    if target.is_dir():
        return agent_files(target)
    if target.suffix not in AGENT_SUFFIXES:
        what = (
            "is not an agent file (<name>.yaml or .yml)"
            if target.exists()
            else "agents folder does not exist"
        )
    elif target.is_file():
        return [target]
    else:
        what = "no such agent file"
    result.errors.append(ConfigError([ConfigProblem(str(target), None, None, what)]))
    return []
