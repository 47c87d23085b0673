"""Read YAML into specs, keeping every value's line and column for error messages.

The YAML is composed into nodes (which carry marks), turned into plain Python
while recording where each path came from, `${VAR}` / `${VAR:-default}` are
replaced from the environment, and the result is validated by pydantic. Every
problem is reported as file:line:column plus what was expected.
"""

from __future__ import annotations

import difflib
import os
import re
import types
import typing
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from agentd.config.models import AgentSpec, DaemonSpec, ProviderSpec
from agentd.config.refs import EMBEDDER_CHECK, PROVIDERS, provider_names
from agentd.errors import ConfigError, ConfigProblem

_ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
Loc = tuple[str | int, ...]
AGENT_SUFFIXES = (".yaml", ".yml")  # <name>.yaml or <name>.yml; both for one name is an error
EMPTY_AGENT = "the file is empty: an agent needs at least its purpose, e.g. `purpose: You answer questions.`"


@dataclass
class _Located:
    data: Any
    marks: dict[Loc, tuple[int, int]]  # path -> (line, column), 1-based
    key_marks: dict[Loc, tuple[int, int]]
    unset: dict[Loc, str] = field(default_factory=dict)  # deferred values whose variable is not set


def _mark(node: yaml.Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


def _interpolate(
    text: str,
    file: str,
    mark: tuple[int, int],
    env: Mapping[str, str],
    on_unset: Callable[[str], None] | None = None,
) -> str:
    """`${VAR}` and `${VAR:-default}` replaced; an unset VAR without a default is an error, unless
    `on_unset` takes it (then it reads as empty)."""

    def sub(m: re.Match[str]) -> str:
        var, default = m.group(1), m.group(2)
        if var in env:
            return env[var]
        if default is not None:
            return default
        if on_unset is not None:
            on_unset(var)
            return ""
        raise ConfigError(
            [
                ConfigProblem(
                    file,
                    *mark,
                    f"environment variable {var} is not set (set it, or write ${{{var}:-default}})",
                )
            ]
        )

    return _ENV_RE.sub(sub, text)


# libyaml's parser composes the same nodes with the same marks ~15x faster (18 µs for a small agent
# file instead of 280: most of a 10,000-agent start). Its error messages differ from the pure-Python
# parser's, so a file it refuses is parsed again by the pure one, whose message is the one reported.
_FAST_LOADER: Any = getattr(yaml, "CSafeLoader", None)


def _compose(text: str) -> yaml.Node | None:
    if _FAST_LOADER is not None:
        try:
            return yaml.compose(text, Loader=_FAST_LOADER)
        except yaml.YAMLError:
            pass
    return yaml.compose(text, Loader=yaml.SafeLoader)


def _to_python(
    file: str, text: str, env: Mapping[str, str], deferred: Callable[[Loc], bool] | None = None
) -> _Located:
    """`deferred(loc)`: whether an unset variable in the value at `loc` is recorded in `unset` (the
    value reads as empty) instead of being an error."""
    try:
        root = _compose(text)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (None, None)
        what = " ".join(x for x in (e.context, e.problem) if x)
        raise ConfigError([ConfigProblem(file, line, col, f"invalid YAML: {what}")]) from None
    except yaml.YAMLError as e:
        raise ConfigError([ConfigProblem(file, None, None, f"invalid YAML: {e}")]) from None

    walker = _Walker(file, env, deferred)
    data = {} if root is None else walker.walk(root, ())
    return _Located(data, walker.marks, walker.key_marks, walker.unset)


class _Walker:
    """Nodes to plain Python, recording each path's line and column.

    A class, not a recursive closure: a closure that refers to itself is a cycle
    holding the whole node tree until a full collection, and 10,000 agent files
    at a start made the cyclic collector ~40% of the load.
    """

    def __init__(self, file: str, env: Mapping[str, str], deferred: Callable[[Loc], bool] | None = None):
        self.file = file
        self.env = env
        self.deferred = deferred
        self.unset: dict[Loc, str] = {}
        self.constructor = yaml.constructor.SafeConstructor()
        self.marks: dict[Loc, tuple[int, int]] = {}
        self.key_marks: dict[Loc, tuple[int, int]] = {}

    def walk(self, node: yaml.Node, loc: Loc) -> Any:
        file = self.file
        self.marks[loc] = _mark(node)
        if isinstance(node, yaml.MappingNode):
            out: dict[str, Any] = {}
            for key_node, value_node in node.value:
                key = self.constructor.construct_object(key_node, deep=True)
                if not isinstance(key, str):
                    raise ConfigError(
                        [ConfigProblem(file, *_mark(key_node), f"expected a text key, got {key!r}")]
                    )
                if key in out:
                    raise ConfigError([ConfigProblem(file, *_mark(key_node), f"duplicate key {key!r}")])
                self.key_marks[(*loc, key)] = _mark(key_node)
                out[key] = self.walk(value_node, (*loc, key))
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.walk(child, (*loc, i)) for i, child in enumerate(node.value)]
        value = self.constructor.construct_object(node, deep=True)
        if isinstance(value, str) and "${" in value:
            on_unset = None
            if self.deferred is not None and self.deferred(loc):
                line, col = self.marks[loc]
                where = f"{file}:{line}:{col}: {'.'.join(map(str, loc))}"

                def on_unset(var: str, where: str = where, loc: Loc = loc) -> None:
                    self.unset.setdefault(loc, f"{where}: environment variable {var} is not set")

            value = _interpolate(value, file, self.marks[loc], self.env, on_unset)
            # An unquoted `${PORT}` should behave as if the number had been written.
            # (a plain scalar's style is None from the pure-Python parser, '' from libyaml's)
            if not getattr(node, "style", None) and value != "":
                resolved = yaml.safe_load(value)
                if isinstance(resolved, int | float | bool):
                    value = resolved
        return value


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
    located: _Located,
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
            line, col = _nearest_mark(located, loc)
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


def _trim_to_data(located: _Located, loc: Loc) -> Loc:
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


def _nearest_mark(located: _Located, loc: Loc) -> tuple[int | None, int | None]:
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
) -> AgentSpec:
    """Load one agent file; the agent's name is the file stem. Raises ConfigError.

    An agent without `model:` gets `default_model` (agentd.yaml's defaults.model), else offline.
    With `providers`, every model reference must name one of them.
    """
    file = str(path)
    twins = twin_files(path)
    if twins:
        raise ConfigError(
            [ConfigProblem(file, None, None, f"{twins[0]} defines agent {path.stem!r} too: keep one of them")]
        )
    text = path.read_text(encoding="utf-8") if text is None else text
    located = _to_python(file, text, os.environ if env is None else env)
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
    references = spec.reference_problems()
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
    located = _to_python(file, text, os.environ if env is None else env, deferred=_provider_setting)
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
