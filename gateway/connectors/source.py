"""Manifest text -> plain data, with the line of every key for error messages."""

from __future__ import annotations

import json
from typing import Any, TypeAlias

import yaml

Path: TypeAlias = tuple[str | int, ...]


class SourceError(ValueError):
    """Text that is not valid YAML/JSON; `line` counts from 1 when known."""

    def __init__(self, message: str, line: int | None) -> None:
        super().__init__(message)
        self.line = line


def parse_source(text: str, filename: str) -> tuple[Any, dict[Path, int]]:
    """The document in `text` and a map from each key's path to its line (1-based).

    JSON (`*.json`) is parsed by the json module, which is exact; its lines come from a YAML
    composition of the same text when PyYAML can read it (JSON is nearly YAML), else none.
    """
    if filename.endswith(".json"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SourceError(f"not valid JSON: {exc.msg}", exc.lineno) from None
        try:
            node = _compose(text)
        except yaml.YAMLError:
            return data, {}
        return data, _lines(node)
    try:
        node = _compose(text)
        loader = yaml.SafeLoader(text)
        try:
            data = loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark is not None else None
        raise SourceError(f"not valid YAML: {exc.problem}", line) from None
    except yaml.YAMLError as exc:
        raise SourceError(f"not valid YAML: {exc}", None) from None
    return data, _lines(node)


def _compose(text: str) -> yaml.Node | None:
    loader = yaml.SafeLoader(text)
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()


def _lines(root: yaml.Node | None) -> dict[Path, int]:
    lines: dict[Path, int] = {}
    # Iterative walk with the path on the stack; aliases are shared nodes, so an anchored
    # block (`execution: *hubspotExecution`) gets lines under every path that uses it.
    stack: list[tuple[yaml.Node, Path, int]] = [(root, (), 0)] if root is not None else []
    while stack:
        node, path, depth = stack.pop()
        if depth > 64:  # a recursive alias; the data itself will be refused elsewhere
            continue
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.value == "<<":
                    continue
                child = (*path, key_node.value)
                lines[child] = key_node.start_mark.line + 1
                stack.append((value_node, child, depth + 1))
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                child = (*path, index)
                lines[child] = item.start_mark.line + 1
                stack.append((item, child, depth + 1))
    return lines


def line_of(lines: dict[Path, int], path: Path) -> int | None:
    """The line of `path`, or of its nearest ancestor that has one."""
    for end in range(len(path), 0, -1):
        found = lines.get(path[:end])
        if found is not None:
            return found
    return None
