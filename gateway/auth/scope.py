"""What each principal may reach: the scope of its token (`auth.tokens[]`).

A token without scope keys reaches everything. A token with any of `tools`, `prompts`,
`resources` or `upstreams` reaches only what they grant, for every kind of request (deny by
default): a principal limited to `notes__*` tools sees no resources, prompts or completions
and cannot change any upstream's log level, unless `upstreams` or the other keys grant them.

    tools       exposed tool names (fnmatch globs)
    prompts     exposed prompt names (globs)
    resources   resource URIs (globs); a template is listed when a glob matches its uriTemplate
    upstreams   upstream names: everything of those upstreams, log level included
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from dataclasses import dataclass

from ..config.model import AuthConfig, TokenConfig

__all__ = ["PrincipalScope"]

_NOTHING = re.compile(r"(?!)")


@dataclass(frozen=True)
class _Grant:
    tools: re.Pattern[str]
    prompts: re.Pattern[str]
    resources: re.Pattern[str]
    upstreams: frozenset[str]
    key: tuple[tuple[str, ...], ...]


class PrincipalScope:
    """Per-principal access checks; a principal without a scope reaches everything."""

    def __init__(self, auth: AuthConfig) -> None:
        self._grants: dict[str, _Grant] = {}
        for entry in auth.tokens:
            grant = _grant(entry)
            if grant is not None:
                self._grants[entry.principal] = grant

    def key(self, principal: str) -> object:
        """Principals with equal keys see the same things (cached listings are shared by key)."""
        grant = self._grants.get(principal)
        return None if grant is None else grant.key

    def may_use_tool(self, principal: str, name: str, upstream: str | None) -> bool:
        grant = self._grants.get(principal)
        return grant is None or bool(grant.tools.match(name)) or (upstream is not None and upstream in grant.upstreams)

    def may_use_prompt(self, principal: str, name: str, upstream: str) -> bool:
        grant = self._grants.get(principal)
        return grant is None or bool(grant.prompts.match(name)) or upstream in grant.upstreams

    def may_use_resource(self, principal: str, uri: str, upstream: str) -> bool:
        """A resource URI (read, subscribe, list, complete), or a template's uriTemplate text."""
        grant = self._grants.get(principal)
        return grant is None or bool(grant.resources.match(uri)) or upstream in grant.upstreams

    def upstreams_for(self, principal: str, names: Iterable[str]) -> list[str]:
        """The upstreams whose shared settings (the log level) this principal may change."""
        grant = self._grants.get(principal)
        return [n for n in names if grant is None or n in grant.upstreams]


def _grant(entry: TokenConfig) -> _Grant | None:
    keys = (entry.tools, entry.prompts, entry.resources, entry.upstreams)
    if all(k is None for k in keys):
        return None
    return _Grant(
        tools=_any_of(entry.tools),
        prompts=_any_of(entry.prompts),
        resources=_any_of(entry.resources),
        upstreams=frozenset(entry.upstreams or ()),
        key=tuple(tuple(k) if k is not None else ("<none>",) for k in keys),
    )


def _any_of(globs: list[str] | None) -> re.Pattern[str]:
    """One regex matching what any glob matches (fnmatch, case-sensitive); none: nothing."""
    if not globs:
        return _NOTHING
    return re.compile("|".join(f"(?:{fnmatch.translate(g)})" for g in globs))
