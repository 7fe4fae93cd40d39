"""Environment overrides of the config file: `DEX_GATEWAY__<KEY>__<KEY>...=<YAML value>`.

    DEX_GATEWAY__SERVER__PORT=9000
    DEX_GATEWAY__FENCES__STORE=postgresql://gateway@db/gateway
    DEX_GATEWAY__TELEMETRY__METRICS=false
    DEX_GATEWAY__UPSTREAMS__0__URL=http://tools:9000/mcp      (a list item by its index)

Each variable sets one key, after `${VAR}` expansion of the file and before validation, so an
override is checked like the file (an unknown key or a wrong type is an error that names the
variable). Names are matched case-insensitively; the value is read as YAML (`9000` is a number,
`[a, b]` a list; quote a string that would read otherwise). For a container: one image, one
config file, and what differs per deployment in the environment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from ..protocol import JsonObject
from ..errors import ConfigError
from .yaml_source import KeyPath, SourcedDocument

__all__ = ["PREFIX", "apply_env_overrides"]

PREFIX = "DEX_GATEWAY__"


@dataclass
class _Overridden(SourcedDocument):
    """The file's document, with the overridden keys located at their variables."""

    variables: dict[KeyPath, str] = field(default_factory=dict)

    def where(self, path: KeyPath) -> str:
        for cut in range(len(path), 0, -1):
            name = self.variables.get(tuple(path[:cut]))
            if name is not None:
                return f"environment variable {name}"
        return super().where(path)


def apply_env_overrides(data: Any, doc: SourcedDocument, environ: Mapping[str, str]) -> tuple[Any, SourcedDocument]:
    names = sorted(n for n in environ if n.upper().startswith(PREFIX) and len(n) > len(PREFIX))
    if not names:
        return data, doc
    if not isinstance(data, dict):
        return data, doc
    located = _Overridden(data, doc.source, doc.lines)
    for name in names:
        path: KeyPath = tuple(int(p) if p.isdigit() else p.lower() for p in name[len(PREFIX):].split("__"))
        if any(p == "" for p in path):
            raise ConfigError(f"environment variable {name}: empty key in the name (two __ in a row?)")
        try:
            value = yaml.safe_load(environ[name]) if environ[name].strip() else ""
        except yaml.YAMLError:
            raise ConfigError(f"environment variable {name}: the value is not valid YAML") from None
        _set(data, path, value, name)
        located.variables[path] = name
    return data, located


def _set(data: JsonObject, path: KeyPath, value: Any, name: str) -> None:
    node: Any = data
    for i, part in enumerate(path[:-1]):
        following = path[i + 1]
        if isinstance(node, dict):
            if not isinstance(node.get(part), (dict, list)):
                node[part] = [] if isinstance(following, int) else {}
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        else:
            raise ConfigError(f"environment variable {name}: {'.'.join(map(str, path[:i + 1]))} does not exist to override")
    last = path[-1]
    if isinstance(node, dict):
        node[last] = value
    elif isinstance(node, list) and isinstance(last, int) and last <= len(node):
        if last == len(node):
            node.append(value)
        else:
            node[last] = value
    else:
        raise ConfigError(f"environment variable {name}: {'.'.join(map(str, path))} does not exist to override")
