"""YAML text to plain Python, keeping every value's line and column, with `${VAR}` replaced.

The text is composed into nodes (which carry marks) and walked into dicts, lists and scalars while
recording where each path came from, so that a later validation error can name file:line:column.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from agentd.errors import ConfigError, ConfigProblem

_ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
Loc = tuple[str | int, ...]


@dataclass
class Located:
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


def to_python(
    file: str, text: str, env: Mapping[str, str], deferred: Callable[[Loc], bool] | None = None
) -> Located:
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
    return Located(data, walker.marks, walker.key_marks, walker.unset)


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
