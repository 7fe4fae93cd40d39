"""YAML composition under limits: the node graph of one document, refused early when hostile.

PyYAML composes aliases as shared nodes, so composing a "billion laughs" document is cheap;
what explodes is any walk of the result (every consumer walks every alias path). This
composer keeps, for every finished node, how many nodes and how many nesting levels it
stands for once aliases are expanded, and refuses the document the moment those pass the
limits: the work is linear in the text, whatever the aliases multiply to.

It reuses PyYAML's Composer (and libyaml's event parser when installed, for speed), and
adds only the counting in `compose_node`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, NoReturn

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent, ScalarEvent
from yaml.resolver import Resolver

try:  # libyaml's parser is ~3x faster; the pure-Python one gives the same events.
    from yaml.cyaml import CParser as _Parser
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    from yaml.parser import Parser as _PyParser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _Parser(Reader, Scanner, _PyParser):  # type: ignore[no-redef, misc]
        def __init__(self, stream: str) -> None:
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            _PyParser.__init__(self)


@dataclass(frozen=True)
class SourceLimits:
    """What one configuration file, manifest or stored registration may cost to read.

    `max_nodes` and `max_depth` count the document as its consumers see it, aliases
    expanded; `max_aliases` counts alias uses (`*name`). The defaults leave every real
    manifest and config far inside (the published manifests: under 10 KB, under 1,000
    nodes, 5 aliases, 12 levels).
    """

    max_bytes: int = 1024 * 1024
    max_depth: int = 64
    max_aliases: int = 100
    max_nodes: int = 100_000
    time_budget_seconds: float = 5.0


DEFAULT_LIMITS = SourceLimits()


class SourceError(ValueError):
    """A document that cannot be read; `line` counts from 1 when known."""

    def __init__(self, source: str, line: int | None, problem: str) -> None:
        super().__init__(f"{source}:{line}: {problem}" if line is not None else f"{source}: {problem}")
        self.source = source
        self.line = line
        self.problem = problem


class LimitExceeded(SourceError):
    """The document is over one of the `SourceLimits` (the message names which, and where)."""


class DuplicateKey(SourceError):
    """A mapping names the same key twice."""


def compose(text: str, source: str, limits: SourceLimits = DEFAULT_LIMITS) -> yaml.Node | None:
    """The root node of the single YAML document in `text` (None when empty), within `limits`."""
    check_size(text, source, limits)
    loader = _LimitedLoader(text, source, limits)
    try:
        return loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = ", ".join(part for part in (exc.context, exc.problem) if part)
        raise SourceError(source, mark.line + 1 if mark is not None else None, f"not valid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise SourceError(source, None, f"not valid YAML: {exc}") from None
    finally:
        loader.dispose()


def check_size(text: str, source: str, limits: SourceLimits) -> None:
    # len() counts characters; a character is at least one byte, so this never refuses
    # less than max_bytes of UTF-8 and is exact for ASCII.
    if len(text) > limits.max_bytes or len(text.encode("utf-8", "surrogatepass")) > limits.max_bytes:
        raise LimitExceeded(source, None, f"document is over the size limit of {limits.max_bytes} bytes")


class _LimitedLoader(Composer, _Parser, SafeConstructor, Resolver):  # type: ignore[misc]
    def __init__(self, text: str, source: str, limits: SourceLimits) -> None:
        _Parser.__init__(self, text)
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self._source = source
        self._limits = limits
        self._deadline = time.monotonic() + limits.time_budget_seconds
        self._aliases = 0
        self._depth = 0  # collections open around the node being composed
        # (expanded nodes, expanded height) of each finished anchored node, by anchor
        self._anchored: dict[str, tuple[int, int]] = {}
        # per open collection: [expanded nodes of its children so far, their greatest height]
        self._frames: list[list[int]] = [[0, 0]]

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        line = event.start_mark.line + 1
        if time.monotonic() > self._deadline:
            self._refuse(line, f"reading took longer than the time budget of {self._limits.time_budget_seconds:g} s")
        if isinstance(event, AliasEvent):
            self._aliases += 1
            if self._aliases > self._limits.max_aliases:
                self._refuse(line, f"more than {self._limits.max_aliases} aliases (*name)")
            node = super().compose_node(parent, index)
            size = self._anchored.get(event.anchor)
            if size is None:
                self._refuse(line, f"alias *{event.anchor} refers to a node that contains it")
            self._count(*size, line)
            return node
        if isinstance(event, ScalarEvent):
            node = super().compose_node(parent, index)
            self._finish(event.anchor, 1, 0, line)
            return node
        self._depth += 1
        if self._depth > self._limits.max_depth:
            self._refuse(line, f"nested deeper than {self._limits.max_depth} levels")
        self._frames.append([0, 0])
        node = super().compose_node(parent, index)
        nodes, height = self._frames.pop()
        self._depth -= 1
        self._finish(event.anchor, 1 + nodes, 1 + height, line)
        return node

    def _finish(self, anchor: str | None, nodes: int, height: int, line: int) -> None:
        if anchor is not None:
            self._anchored[anchor] = (nodes, height)
        self._count(nodes, height, line)

    def _count(self, nodes: int, height: int, line: int) -> None:
        """Add a finished child (`nodes` and `height` with aliases expanded) to its parent."""
        frame = self._frames[-1]
        frame[0] += nodes
        frame[1] = max(frame[1], height)
        if self._depth + height > self._limits.max_depth:
            self._refuse(line, f"nested deeper than {self._limits.max_depth} levels (aliases expanded)")
        if sum(f[0] for f in self._frames) > self._limits.max_nodes:
            self._refuse(line, f"more than {self._limits.max_nodes} values (aliases expanded)")

    def _refuse(self, line: int, problem: str) -> NoReturn:
        raise LimitExceeded(self._source, line, problem)


__all__ = ["DEFAULT_LIMITS", "DuplicateKey", "LimitExceeded", "SourceError", "SourceLimits", "check_size", "compose"]
