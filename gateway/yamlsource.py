"""YAML loading that remembers where every value came from, and `${ENV}` expansion.

Pydantic reports errors by path (`upstreams.1.url`); people need a file and a line. We keep
PyYAML's node marks in a path -> line map so every config error can point at its line.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError

Path_ = tuple[str | int, ...]
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass
class SourcedDocument:
    """A parsed YAML document plus the line (1-based) of each value, by path."""

    data: Any
    source: str
    lines: dict[Path_, int] = field(default_factory=dict)

    def where(self, path: Path_) -> str:
        """`file:line` of the deepest known ancestor of `path`."""
        for cut in range(len(path), -1, -1):
            line = self.lines.get(tuple(path[:cut]))
            if line is not None:
                return f"{self.source}:{line}"
        return self.source


def load_yaml(text: str, source: str) -> SourcedDocument:
    """Parse one YAML document; duplicate keys are an error (PyYAML would keep the last)."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{where}: invalid YAML: {problem}") from None
    doc = SourcedDocument(data=None, source=source)
    if node is None:
        doc.data = {}
        return doc
    doc.data = _convert(node, (), doc)
    return doc


def load_yaml_file(path: str | Path) -> SourcedDocument:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{p}: file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: cannot read: {exc}") from None
    return load_yaml(text, str(p))


def _convert(node: yaml.Node, path: Path_, doc: SourcedDocument) -> Any:
    doc.lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            # Keys are scalars in any sane config; a complex key is named by its text.
            key = str(key_node.value)
            if key in out:
                raise ConfigError(f"{doc.source}:{key_node.start_mark.line + 1}: duplicate key {dotted(path + (key,))!r}")
            out[key] = _convert(value_node, path + (key,), doc)
            # The key's own line is more useful than the value's for "unknown key" errors.
            doc.lines[path + (key,)] = key_node.start_mark.line + 1
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_convert(child, path + (i,), doc) for i, child in enumerate(node.value)]
    return yaml.SafeLoader("").construct_object(node)


def expand_env(doc: SourcedDocument, environ: Mapping[str, str] | None = None) -> Any:
    """Replace `${VAR}` in every string; a missing variable is an error naming key and line."""
    env = os.environ if environ is None else environ

    def walk(value: Any, path: Path_) -> Any:
        if isinstance(value, dict):
            return {k: walk(v, path + (k,)) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, path + (i,)) for i, v in enumerate(value)]
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


def dotted(path: Path_) -> str:
    """`upstreams.1.url`: how errors name a key."""
    return ".".join(str(p) for p in path) or "(top level)"
