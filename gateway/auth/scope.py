"""What each principal may reach: the scope of its token (`auth.tokens[]`).

A token without scope keys reaches everything. A token with any of `tools`, `prompts`,
`resources` or `upstreams` reaches only what they grant, for every kind of request (deny by
default): a principal limited to `notes__*` tools sees no resources, prompts or completions
and cannot change any upstream's log level, unless `upstreams` or the other keys grant them.

    tools       exposed tool names (fnmatch globs)
    prompts     exposed prompt names (globs)
    resources   resource URIs (globs); a template is listed when a glob matches its uriTemplate
    upstreams   upstream names: everything of those upstreams, log level included

An OAuth principal (`auth.oauth`) gets its scope from its token's claims: the union of the
`auth.oauth.grants` whose `when` its claims match, else `auth.oauth.default`, else nothing; with
no `grants` configured, everything. The auth middleware binds each verified identity (`bind`), so
the scope follows the claims of the principal's latest token (groups changed at the identity
provider take effect with the next token); a principal not bound (yet, or any more) reaches nothing.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cachetools import LRUCache

from ..config.model import AuthConfig, TokenConfig
from ..config.oauth import ClaimGrantConfig, OAuthConfig, ScopeGrantConfig
from .oauth.verifier import claim_at
from .principals import Identity

__all__ = ["ClaimGrants", "PrincipalScope", "oauth_approvals", "oauth_approver"]

_NOTHING = re.compile(r"(?!)")


@dataclass(frozen=True)
class _Grant:
    tools: re.Pattern[str]
    prompts: re.Pattern[str]
    resources: re.Pattern[str]
    upstreams: frozenset[str]
    key: tuple[tuple[str, ...], ...]


# OAuth principals remembered with their scope (least recently seen go first).
_BOUND_PRINCIPALS = 100_000


class PrincipalScope:
    """Per-principal access checks; a principal without a scope reaches everything."""

    def __init__(self, auth: AuthConfig) -> None:
        self._grants: dict[str, _Grant] = {}
        for entry in auth.tokens:
            grant = _grant(entry)
            if grant is not None:
                self._grants[entry.principal] = grant
        self._static = frozenset(t.principal for t in auth.tokens)
        oauth = auth.oauth
        self._claims = ClaimGrants(oauth.grants, oauth.default) if oauth is not None and oauth.grants is not None else None
        self._bound: LRUCache[str, _Grant] = LRUCache(maxsize=_BOUND_PRINCIPALS)

    def bind(self, identity: Identity) -> None:
        """An OAuth principal's scope from its verified claims (static principals keep theirs)."""
        if self._claims is not None and identity.principal not in self._static:
            self._bound[identity.principal] = self._claims.grant(identity.claims)

    def _of(self, principal: str) -> _Grant | None:
        grant = self._grants.get(principal)
        if grant is not None or self._claims is None or principal in self._static:
            return grant
        return self._bound.get(principal, _DENY_ALL)

    def key(self, principal: str) -> object:
        """Principals with equal keys see the same things (cached listings are shared by key)."""
        grant = self._of(principal)
        return None if grant is None else grant.key

    def may_use_tool(self, principal: str, name: str, upstream: str | None) -> bool:
        grant = self._of(principal)
        return grant is None or bool(grant.tools.match(name)) or (upstream is not None and upstream in grant.upstreams)

    def may_use_prompt(self, principal: str, name: str, upstream: str) -> bool:
        grant = self._of(principal)
        return grant is None or bool(grant.prompts.match(name)) or upstream in grant.upstreams

    def may_use_resource(self, principal: str, uri: str, upstream: str) -> bool:
        """A resource URI (read, subscribe, list, complete), or a template's uriTemplate text."""
        grant = self._of(principal)
        return grant is None or bool(grant.resources.match(uri)) or upstream in grant.upstreams

    def upstreams_for(self, principal: str, names: Iterable[str]) -> list[str]:
        """The upstreams whose shared settings (the log level) this principal may change."""
        grant = self._of(principal)
        return [n for n in names if grant is None or n in grant.upstreams]


class ClaimGrants:
    """`auth.oauth.grants`: claims -> the union of the matching grants (compiled once per set)."""

    def __init__(self, grants: Sequence[ClaimGrantConfig], default: ScopeGrantConfig | None) -> None:
        self._grants = list(grants)
        self._default = default
        self._compiled: LRUCache[tuple[int, ...], _Grant] = LRUCache(maxsize=1024)

    def matching(self, claims: Mapping[str, Any]) -> tuple[int, ...]:
        """The indexes of the grants whose `when` the claims meet; (-1,) for the default; () for none."""
        found = tuple(i for i, g in enumerate(self._grants) if _meets(claims, g.when))
        return found or ((-1,) if self._default is not None else ())

    def grant(self, claims: Mapping[str, Any]) -> _Grant:
        chosen = self.matching(claims)
        compiled = self._compiled.get(chosen)
        if compiled is None:
            parts: list[ScopeGrantConfig] = [self._grants[i] for i in chosen if i >= 0]
            if chosen == (-1,) and self._default is not None:
                parts = [self._default]
            compiled = self._compiled[chosen] = _union(parts, key=("<claims>", *map(str, chosen)))
        return compiled


def oauth_approvals(config: OAuthConfig, claims: Mapping[str, Any]) -> str:
    """An OAuth principal's approvals mode: `auth.oauth.approvals`, or "gateway" when a grant that
    says so matches its claims (docs/approvals.md)."""
    if config.approvals == "gateway" or any(
        g.approvals == "gateway" and _meets(claims, g.when) for g in config.grants or ()
    ):
        return "gateway"
    return "client"


def oauth_approver(config: OAuthConfig, claims: Mapping[str, Any]) -> bool:
    """Whether an OAuth identity may decide held calls: its claims meet `auth.oauth.approvers`."""
    return config.approvers is not None and _meets(claims, config.approvers)


def _meets(claims: Mapping[str, Any], when: Mapping[str, list[str]]) -> bool:
    """Every named claim has one of its listed values (a list claim: any element; `scope`: split)."""
    for name, accepted in when.items():
        value = claim_at(claims, name)
        if isinstance(value, str):
            values = value.split() if name == "scope" else [value]
        elif isinstance(value, list):
            values = [str(v) for v in value if isinstance(v, (str, int))]
        elif isinstance(value, (int, bool)):
            values = [str(value).lower() if isinstance(value, bool) else str(value)]
        else:
            return False
        if not any(v in accepted for v in values):
            return False
    return True


def _union(parts: Sequence[ScopeGrantConfig], key: tuple[str, ...]) -> _Grant:
    """What any of the parts grants (nothing when there are none)."""

    def every(kind: str) -> list[str]:
        return [glob for part in parts for glob in (getattr(part, kind) or ())]

    return _Grant(tools=_any_of(every("tools")), prompts=_any_of(every("prompts")),
                  resources=_any_of(every("resources")), upstreams=frozenset(every("upstreams")), key=(key,))


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


_DENY_ALL = _Grant(tools=_NOTHING, prompts=_NOTHING, resources=_NOTHING, upstreams=frozenset(), key=(("<deny>",),))


def _any_of(globs: list[str] | None) -> re.Pattern[str]:
    """One regex matching what any glob matches (fnmatch, case-sensitive); none: nothing."""
    if not globs:
        return _NOTHING
    return re.compile("|".join(f"(?:{fnmatch.translate(g)})" for g in globs))
