"""The one loader of the gateway's documents: config, connector manifests (YAML or JSON),
binding files and stored registrations; values plus the line of every key; `${ENV}` expansion.

Pydantic and JSON Schema report errors by path (`upstreams.1.url`); people need a file and
a line, so every document comes with a path -> line map. Every document is read within
`SourceLimits` (size, nesting depth, aliases, values with aliases expanded, time), and a
key written twice in one mapping is an error in YAML and JSON alike: a reviewer must never
approve one value while the gateway reads another.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

import yaml

from ..protocol import JsonObject
from ..errors import ConfigError
from .yaml_compose import DEFAULT_LIMITS, DuplicateKey, LimitExceeded, SourceError, SourceLimits, check_size, compose

KeyPath: TypeAlias = tuple[str | int, ...]
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_MERGE_TAG = "tag:yaml.org,2002:merge"
_PLAIN_TAGS = frozenset({"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"})


@dataclass
class SourcedDocument:
    """A parsed document plus the line (1-based) of each value, by path."""

    data: Any
    source: str
    lines: dict[KeyPath, int] = field(default_factory=dict)

    def line(self, path: KeyPath) -> int | None:
        """The line of `path`, or of its nearest ancestor that has one."""
        for cut in range(len(path), -1, -1):
            found = self.lines.get(tuple(path[:cut]))
            if found is not None:
                return found
        return None

    def where(self, path: KeyPath) -> str:
        """`file:line` of the deepest known ancestor of `path`."""
        line = self.line(path)
        return f"{self.source}:{line}" if line is not None else self.source


def load_source(text: str, source: str, limits: SourceLimits = DEFAULT_LIMITS) -> SourcedDocument:
    """JSON for `*.json`, YAML for anything else."""
    return load_json(text, source, limits) if source.endswith(".json") else load_yaml(text, source, limits)


def load_file(path: str | Path, limits: SourceLimits = DEFAULT_LIMITS) -> SourcedDocument:
    """Read and load `path`; a missing, unreadable or oversized file is a SourceError."""
    p = Path(path)
    try:
        if p.stat().st_size > limits.max_bytes:
            raise LimitExceeded(str(p), None, f"file is over the size limit of {limits.max_bytes} bytes")
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SourceError(str(p), None, "file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SourceError(str(p), None, f"cannot read: {exc}") from None
    return load_source(text, str(p), limits)


def load_yaml(text: str, source: str, limits: SourceLimits = DEFAULT_LIMITS) -> SourcedDocument:
    """Parse one YAML document (an empty one is `{}`)."""
    node = compose(text, source, limits)
    doc = SourcedDocument(data={}, source=source)
    if node is not None:
        doc.data = _Converter(doc).value(node, ())
    return doc


def load_json(text: str, source: str, limits: SourceLimits = DEFAULT_LIMITS) -> SourcedDocument:
    """Parse JSON with the json module (exact numbers and escapes) under the same limits and
    duplicate-key rule as YAML. Lines come from reading the same text as YAML (JSON is
    nearly YAML), which also finds duplicates and limits with their line; JSON that YAML
    cannot read is still checked, without lines."""
    check_size(text, source, limits)
    lines: dict[KeyPath, int] = {}
    try:
        lines = load_yaml(text, source, limits).lines
    except (DuplicateKey, LimitExceeded):
        raise
    except SourceError:
        pass  # valid JSON that YAML reads differently (e.g. tabs): no lines, checks below
    try:
        data = json.loads(text, object_pairs_hook=_unique_pairs(source))
    except json.JSONDecodeError as exc:
        raise SourceError(source, exc.lineno, f"not valid JSON: {exc.msg}") from None
    except RecursionError:
        raise LimitExceeded(source, None, f"nested deeper than {limits.max_depth} levels") from None
    _check_shape(data, source, limits)
    return SourcedDocument(data=data, source=source, lines=lines)


class _Converter:
    """Nodes -> plain data (aliases expanded, within the limits checked while composing)."""

    def __init__(self, doc: SourcedDocument) -> None:
        self._doc = doc
        self._scalars = yaml.SafeLoader("")  # constructs scalars by their resolved tag

    def value(self, node: yaml.Node, path: KeyPath) -> Any:
        self._doc.lines[path] = node.start_mark.line + 1
        if isinstance(node, yaml.ScalarNode):
            try:
                return self._scalars.construct_object(node)
            except yaml.YAMLError as exc:
                raise SourceError(self._doc.source, node.start_mark.line + 1, f"not valid YAML: {getattr(exc, 'problem', exc)}") from None
        if node.tag not in _PLAIN_TAGS:
            raise SourceError(self._doc.source, node.start_mark.line + 1, f"unsupported tag {node.tag!r}")
        if isinstance(node, yaml.SequenceNode):
            return [self.value(child, (*path, i)) for i, child in enumerate(node.value)]
        return self.mapping(node, path)

    def mapping(self, node: yaml.MappingNode, path: KeyPath) -> JsonObject:
        own: JsonObject = {}
        merged: JsonObject = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                # `<<: *defaults` (or a list of them): keys written here win, earlier sources
                # win over later ones, as YAML's merge key says.
                for merged_node in self._merge_sources(value_node):
                    for key, value in self.mapping(merged_node, path).items():
                        merged.setdefault(key, value)
                continue
            key = self._key(key_node)
            if key in own:
                raise DuplicateKey(self._doc.source, key_node.start_mark.line + 1, f"duplicate key {dotted((*path, key))!r}")
            own[key] = self.value(value_node, (*path, key))
            # The key's own line is more useful than the value's for "unknown key" errors.
            self._doc.lines[(*path, key)] = key_node.start_mark.line + 1
        return {**{k: v for k, v in merged.items() if k not in own}, **own}

    def _key(self, node: yaml.Node) -> str:
        if not isinstance(node, yaml.ScalarNode):
            raise SourceError(self._doc.source, node.start_mark.line + 1, "a key must be a plain value, not a list or mapping")
        return str(node.value)

    def _merge_sources(self, node: yaml.Node) -> list[yaml.MappingNode]:
        sources = node.value if isinstance(node, yaml.SequenceNode) else [node]
        if not all(isinstance(s, yaml.MappingNode) for s in sources):
            raise SourceError(self._doc.source, node.start_mark.line + 1, "<< merges mappings only")
        return sources


def _unique_pairs(source: str) -> Callable[[list[tuple[str, Any]]], JsonObject]:
    def hook(pairs: list[tuple[str, Any]]) -> JsonObject:
        out: JsonObject = {}
        for key, value in pairs:
            if key in out:
                raise DuplicateKey(source, None, f"duplicate key {key!r}")
            out[key] = value
        return out

    return hook


def _check_shape(data: Any, source: str, limits: SourceLimits) -> None:
    """Depth and value count of parsed JSON (iterative: the data may be deep)."""
    count = 0
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        count += 1
        if count > limits.max_nodes:
            raise LimitExceeded(source, None, f"more than {limits.max_nodes} values")
        if isinstance(value, dict | list):
            if depth + 1 > limits.max_depth:
                raise LimitExceeded(source, None, f"nested deeper than {limits.max_depth} levels")
            children = value.values() if isinstance(value, dict) else value
            stack.extend((child, depth + 1) for child in children)


def expand_env(doc: SourcedDocument, environ: Mapping[str, str] | None = None) -> Any:
    """Replace `${VAR}` in every string; a missing variable is an error naming key and line."""
    env = os.environ if environ is None else environ

    def walk(value: Any, path: KeyPath) -> Any:
        if isinstance(value, dict):
            return {k: walk(v, (*path, k)) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, (*path, i)) for i, v in enumerate(value)]
        if isinstance(value, str) and "${" in value:
            def sub(match: re.Match[str]) -> str:
                name = match.group(1)
                if name not in env:
                    raise ConfigError(
                        f"{doc.where(path)}: {dotted(path)}: environment variable {name} is not set"
                    )
                return env[name]

            return _ENV_REF.sub(sub, value)
        return value

    return walk(doc.data, ())


def dotted(path: KeyPath) -> str:
    """`upstreams.1.url`: how errors name a key."""
    return ".".join(str(p) for p in path) or "(top level)"


__all__ = [
    "DEFAULT_LIMITS",
    "DuplicateKey",
    "KeyPath",
    "LimitExceeded",
    "SourceError",
    "SourceLimits",
    "SourcedDocument",
    "dotted",
    "expand_env",
    "load_file",
    "load_json",
    "load_source",
    "load_yaml",
]
