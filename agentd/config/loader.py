"""Read YAML into specs, keeping every value's line and column for error messages.

The YAML is turned into plain Python with every path's line and column and
`${VAR}` / `${VAR:-default}` replaced from the environment (yaml_nodes.py), then
validated by pydantic. Every problem is reported as file:line:column plus what
was expected.
"""

from __future__ import annotations

import difflib
import os
import re
import types
import typing
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from agentd.config.models import AgentSpec, DaemonSpec, ProviderSpec
from agentd.config.refs import EMBEDDER_CHECK, PROVIDERS, provider_names
from agentd.config.yaml_nodes import Loc, Located, to_python
from agentd.errors import ConfigError, ConfigProblem

AGENT_SUFFIXES = (".yaml", ".yml")  # <name>.yaml or <name>.yml; both for one name is an error
EMPTY_AGENT = "the file is empty: an agent needs at least its purpose, e.g. `purpose: You answer questions.`"


def _fields_at(model: type[BaseModel], loc: Loc, data: Any) -> list[str]:
    """The field names of the model found by following loc from `model` (best effort).

    Unions are resolved by the data's `kind` when the members are tagged.
    """
    annotation: Any = model
    node = data
    for part in loc:
        annotation = _unwrap_model(annotation, node)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel) and isinstance(part, str):
            field = annotation.model_fields.get(part)
            if field is None:
                return []
            annotation = field.annotation
        elif typing.get_origin(annotation) in (dict, list):
            annotation = typing.get_args(annotation)[-1]
        else:
            return []
        node = node[part] if isinstance(node, dict | list) and _has(node, part) else None  # type: ignore[index]
    annotation = _unwrap_model(annotation, node)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return list(annotation.model_fields)
    return []


def _has(node: Any, part: str | int) -> bool:
    if isinstance(node, dict):
        return part in node
    return isinstance(part, int) and part < len(node)


def _flatten(annotation: Any) -> list[Any]:
    """The members of a (possibly nested, possibly Annotated) union."""
    if typing.get_origin(annotation) is typing.Annotated:
        return _flatten(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(annotation) for m in _flatten(arg)]
    return [annotation]


def _unwrap_model(annotation: Any, node: Any = None) -> Any:
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in _flatten(annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
        kind = node.get("kind") if isinstance(node, dict) else None
        for member in members:
            tag = member.model_fields.get("kind")
            if kind is not None and tag is not None and kind in typing.get_args(tag.annotation):
                return member
        return members[0] if members else annotation
    return annotation


def _problems(
    file: str,
    located: Located,
    error: ValidationError,
    model: type[BaseModel],
    not_keys: Collection[str] = (),
) -> list[ConfigProblem]:
    """One problem per field, located; `not_keys`: top-level fields never written in the file."""
    problems: list[ConfigProblem] = []
    for err in error.errors():
        loc: Loc = tuple(p for p in err["loc"] if isinstance(p, str | int))
        # pydantic adds union-member names ("DiscordSpec", "int") to loc: drop what is not in the data.
        loc = _trim_to_data(located, loc)
        kind = err["type"]
        if kind == "extra_forbidden":
            key = str(loc[-1])
            line, col = located.key_marks.get(loc, located.marks.get(loc[:-1], (None, None)))
            allowed = [f for f in _fields_at(model, loc[:-1], located.data) if loc[:-1] or f not in not_keys]
            hint = difflib.get_close_matches(key, allowed, n=1)
            msg = f"unknown key {key!r}"
            msg += f" (did you mean {hint[0]!r}?)" if hint else ""
            if allowed:
                msg += f"; expected one of: {', '.join(allowed)}"
        else:
            # a `kind:` that names no strategy is about that value: point at it
            line, col = _nearest_mark(located, (*loc, "kind") if kind == "union_tag_invalid" else loc)
            where = ".".join(str(p) for p in loc) or "top level"
            msg = f"{where}: {_describe(err)}"
            previous = next((i for i, p in enumerate(problems) if p.message.startswith(f"{where}: ")), None)
            if previous is not None:
                # One field, several complaints (each member of a union refused the value): one line.
                merged = f"{problems[previous].message}, or {_describe(err)}"
                problems[previous] = replace(problems[previous], message=merged)
                continue
        problems.append(ConfigProblem(file, line, col, msg))
    # In the order they appear in the file (pydantic reports extra keys after all the fields).
    return sorted(problems, key=lambda p: (p.line or 0, p.column or 0))


def _trim_to_data(located: Located, loc: Loc) -> Loc:
    out: list[str | int] = []
    node: Any = located.data
    for part in loc:
        if isinstance(node, dict) and part in node:
            node = node[part]
            out.append(part)
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
            out.append(part)
        elif isinstance(node, dict) and node.get("kind") == part:
            continue  # a discriminated union's tag (e.g. "window" for kind: window): not in the data
        elif isinstance(node, dict) and isinstance(part, str) and part[:1].islower() and "[" not in part:
            out.append(part)  # a missing or extra key: keep it, it names the problem
            node = None
        # else: a pydantic-internal segment (union member, function-after[...]): skip
    return tuple(out)


def _nearest_mark(located: Located, loc: Loc) -> tuple[int | None, int | None]:
    for i in range(len(loc), -1, -1):
        if loc[:i] in located.marks:
            return located.marks[loc[:i]]
    return None, None


def _describe(err: Any) -> str:
    kind, msg = err["type"], err["msg"]
    if kind == "missing":
        return "this key is required"
    if msg.startswith("Value error, "):
        return msg.removeprefix("Value error, ")
    if kind == "literal_error":
        return msg.replace("Input should be", "expected")
    if kind == "union_tag_invalid":  # `kind: episodc`: pydantic lists the tags; say which was meant
        ctx = err.get("ctx") or {}
        tag, tags = str(ctx.get("tag")), re.findall(r"'([^']*)'", str(ctx.get("expected_tags", "")))
        hint = difflib.get_close_matches(tag, tags, n=1)
        return (
            f"unknown kind {tag!r}"
            + (f" (did you mean {hint[0]!r}?)" if hint else "")
            + f"; expected one of: {', '.join(tags)}"
        )
    return f"{msg[0].lower()}{msg[1:]}" + (
        f" (got {err['input']!r})" if "input" in err and not isinstance(err["input"], dict | list) else ""
    )


def twin_files(path: Path) -> list[Path]:
    """The other files beside `path` that would define the same agent (x.yml for x.yaml)."""
    if path.suffix not in AGENT_SUFFIXES:
        return []
    return [twin for s in AGENT_SUFFIXES if s != path.suffix and (twin := path.with_suffix(s)).is_file()]


def parse_agent(
    path: Path,
    text: str | None = None,
    env: Mapping[str, str] | None = None,
    default_model: str | None = None,
    providers: Collection[str] | None = None,
    known_agents: Collection[str] | None = None,
) -> AgentSpec:
    """Load one agent file; the agent's name is the file stem. Raises ConfigError.

    An agent without `model:` gets `default_model` (agentd.yaml's defaults.model), else offline.
    With `providers`, every model reference must name one of them; with `known_agents`, every
    sub-agent (the daemon loads agents one by one and a sub-agent may come later: `agentd check` only).
    """
    file = str(path)
    twins = twin_files(path)
    if twins:
        raise ConfigError(
            [ConfigProblem(file, None, None, f"{twins[0]} defines agent {path.stem!r} too: keep one of them")]
        )
    text = path.read_text(encoding="utf-8") if text is None else text
    located = to_python(file, text, os.environ if env is None else env)
    if not isinstance(located.data, dict):
        raise ConfigError(
            [ConfigProblem(file, 1, 1, "expected a mapping of keys (purpose, model, memory, ...)")]
        )
    if not located.data:
        # Most often a file caught half-written, or a new one not written yet: never an agent with no purpose.
        raise ConfigError([ConfigProblem(file, None, None, EMPTY_AGENT)])
    if "name" in located.data:
        line, col = located.key_marks[("name",)]
        raise ConfigError(
            [ConfigProblem(file, line, col, "unknown key 'name': an agent's name is its file name")]
        )
    data = {**located.data, "name": path.stem}
    if "model" not in data and default_model:
        data["model"] = default_model
    try:
        spec = AgentSpec.model_validate(data, context=None if providers is None else {PROVIDERS: providers})
    except ValidationError as e:
        problems = _problems(file, located, e, AgentSpec, not_keys=("name",))  # the name is the file's
        for p in problems:
            if p.message.startswith("name:"):
                problems[problems.index(p)] = ConfigProblem(
                    file, None, None, p.message.removeprefix("name: ")
                )
        raise ConfigError(problems) from None
    references = spec.reference_problems(known_agents)
    if references:
        raise ConfigError(
            sorted(
                [
                    ConfigProblem(
                        file,
                        *_nearest_mark(located, loc),
                        f"{'.'.join(str(p) for p in loc if isinstance(p, str))}: {message}",
                    )
                    for loc, message in references
                ],
                key=lambda p: (p.line or 0, p.column or 0),
            )
        )
    return spec


def parse_daemon(
    path: Path,
    env: Mapping[str, str] | None = None,
    check_embedder: Callable[[str, Mapping[str, ProviderSpec]], object] | None = None,
) -> DaemonSpec:
    """Load `agentd.yaml`; a missing file means all defaults.

    Model references must name a built-in provider or one the file declares;
    `check_embedder(ref, providers)`, when given, raises OperatorError for an
    embedder `agentd run` would refuse (agentd.providers.embedders.check_embedder).
    """
    if not path.exists():
        return DaemonSpec()
    file = str(path)
    text = path.read_text(encoding="utf-8")
    located = to_python(file, text, os.environ if env is None else env, deferred=_provider_setting)
    if not isinstance(located.data, dict):
        raise ConfigError([ConfigProblem(file, 1, 1, "expected a mapping of keys (providers, http, ...)")])
    declared = located.data.get("providers")
    context = {
        PROVIDERS: provider_names(declared if isinstance(declared, dict) else ()),
        EMBEDDER_CHECK: check_embedder,
    }
    try:
        spec = DaemonSpec.model_validate(located.data, context=context)
    except ValidationError as e:
        raise ConfigError(_problems(file, located, e, DaemonSpec)) from None
    for loc, reason in located.unset.items():
        spec.providers[str(loc[1])].mark_unavailable(reason)
    return spec


def _provider_setting(loc: Loc) -> bool:
    """A provider's own setting (`providers.groq.api_key`): a variable it names may be unset, so a
    provider no agent uses never blocks the start; the agents that use it show the reason."""
    return len(loc) >= 3 and loc[0] == "providers"
