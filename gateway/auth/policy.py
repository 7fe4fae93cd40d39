"""The policy: `policy.rules` (gateway/config/policy.py) applied to calls and listings.

    Policy.denial(identity, tool, upstream, arguments)   per call, before the fence claims anything:
                                                         the rule that denies it, or None
    Policy.approval(identity, tool, upstream, arguments) per call: the `require_approval` rule that
                                                         holds it for a person (docs/approvals.md), or None
    Policy.hides(identity, tool, upstream)               per listing: a rule that does not read
                                                         `arguments` and denies this caller the tool
    Policy.listing_key(identity)                         what those decisions depend on (the
                                                         listing cache key: gateway/front/tools.py)

A denied call is answered exactly as an unknown tool (the pipeline raises UnknownToolError), so
the caller learns nothing of the rule. An evaluation that fails at run time (a missing key, a
value of another type) denies the call: fail closed, logged with the rule's name.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import cel

from ..config.expressions import Condition, compile_condition, error_kind
from ..config.policy import PolicyConfig, PolicyRuleConfig
from .principals import Identity

__all__ = ["MAX_ARGUMENT_DEPTH", "NO_POLICY", "Denial", "Policy"]

logger = logging.getLogger(__name__)

# Arguments nested deeper than this are never handed to the expression library (its conversion
# recurses): a rule that reads them denies the call. The front's JSON parser stops far earlier.
MAX_ARGUMENT_DEPTH = 256
_ANY = re.compile(r"(?s:.*)\Z")


@dataclass(frozen=True, slots=True)
class Denial:
    """Why a call is denied: the rule, and whether it matched or could not be evaluated."""

    rule: str
    reason: str  # "matched" | "error"
    detail: str = ""  # for the log: never a value of the call
    message: str | None = None  # the rule's message, for the log


@dataclass(frozen=True, slots=True)
class _Rule:
    name: str
    tools: re.Pattern[str]
    principals: re.Pattern[str]
    condition: Condition | None
    message: str | None

    @property
    def reads_arguments(self) -> bool:
        return self.condition is not None and "arguments" in self.condition.variables

    def applies(self, principal: str, tool: str) -> bool:
        return bool(self.tools.match(tool)) and bool(self.principals.match(principal))


class Policy:
    """The deny rules of `policy.rules`, compiled once."""

    def __init__(self, config: PolicyConfig) -> None:
        self._rules = tuple(_rule(r) for r in config.rules if r.effect == "deny")
        self._approval_rules = tuple(_rule(r) for r in config.rules if r.effect == "require_approval")
        self._static = tuple(r for r in self._rules if not r.reads_arguments)
        self._key_parts = _key_parts(self._static)

    @property
    def enabled(self) -> bool:
        return bool(self._rules)

    def approval(self, identity: Identity, tool: str, upstream: str | None, arguments: Mapping[str, Any]) -> Denial | None:
        """The first `require_approval` rule that holds this call for a person's decision, or None.
        A rule that cannot be evaluated for the call holds it too (fail closed: reason "error")."""
        rules = [r for r in self._approval_rules if r.applies(identity.principal, tool)]
        if not rules:
            return None
        return _first_denial(rules, identity, tool, upstream, arguments)

    def denial(self, identity: Identity, tool: str, upstream: str | None, arguments: Mapping[str, Any]) -> Denial | None:
        """The first rule that denies this call, or None."""
        rules = [r for r in self._rules if r.applies(identity.principal, tool)]
        if not rules:
            return None
        return _first_denial(rules, identity, tool, upstream, arguments)

    def hides(self, identity: Identity, tool: str, upstream: str | None) -> bool:
        """Whether a rule that does not read the arguments denies this caller the tool: such a tool
        is left out of the caller's listing (every call of it would be denied)."""
        rules = [r for r in self._static if r.applies(identity.principal, tool)]
        return bool(rules) and _first_denial(rules, identity, tool, upstream, None) is not None

    def listing_key(self, identity: Identity) -> object:
        """What `hides` depends on for this caller besides the tool: callers with equal keys see the
        same listing. Only what the rules read: the principal, the claims they name, the scopes."""
        principal, claims, scopes = self._key_parts
        if not (principal or claims or scopes):
            return None
        claim_values: object = None
        if claims == "all":
            claim_values = _canonical(dict(identity.claims))
        elif claims:
            # A claim that is absent and one that is null differ (`has(claims.x)`): both are in the key.
            claim_values = tuple((name, name in identity.claims, _canonical(identity.claims.get(name)))
                                 for name in sorted(claims))
        return (identity.principal if principal else None, claim_values,
                tuple(sorted(identity.scopes)) if scopes else None)


def _first_denial(rules: list[_Rule], identity: Identity, tool: str, upstream: str | None,
                  arguments: Mapping[str, Any] | None) -> Denial | None:
    """`arguments` None: a listing (the rules given read none)."""
    context: cel.Context | None = None
    for rule in rules:
        condition = rule.condition
        if condition is None:
            return Denial(rule.name, "matched", message=rule.message)
        try:
            if context is None:
                context = _context(rules, identity, tool, upstream, arguments)
                if context is None:
                    return Denial(rule.name, "error", f"arguments nested deeper than {MAX_ARGUMENT_DEPTH} levels")
            if condition.evaluate(context):
                return Denial(rule.name, "matched", message=rule.message)
        except Exception as exc:  # noqa: BLE001 - any failure of a rule denies the call (fail closed)
            return Denial(rule.name, "error", error_kind(exc))
    return None


def _context(rules: list[_Rule], identity: Identity, tool: str, upstream: str | None,
             arguments: Mapping[str, Any] | None) -> cel.Context | None:
    """The variables the rules read, converted once for all of them (a conversion costs more than
    an evaluation: only what is read is converted). None: arguments nested too deep to convert."""
    wanted: set[str] = set()
    conditions = [r.condition for r in rules if r.condition is not None]
    for condition in conditions:
        wanted |= condition.variables
    values: dict[str, Any] = {}
    for name in wanted:
        if name == "tool":
            values[name] = tool
        elif name == "upstream":
            values[name] = upstream or ""
        elif name == "principal":
            values[name] = identity.principal
        elif name == "claims":
            values[name] = _read(identity.claims, [c.claim_names for c in conditions if "claims" in c.variables])
        elif name == "scopes":
            values[name] = sorted(identity.scopes)
        elif name == "arguments":
            args = _read(arguments or {}, [c.argument_names for c in conditions if "arguments" in c.variables])
            if _too_deep(args):
                return None
            values[name] = args
    return cel.Context(values)


def _read(values: Mapping[str, Any], names: list[frozenset[str] | None]) -> dict[str, Any]:
    """The fields of `values` the conditions read (all of them when one reads the map as a whole):
    a 1 MB argument that no rule reads is never converted. A field that is not there stays missing."""
    if any(n is None for n in names):
        return dict(values)
    wanted = frozenset().union(*(n for n in names if n is not None))
    return {k: values[k] for k in wanted if k in values}


def _too_deep(value: Any) -> bool:
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_ARGUMENT_DEPTH:
            return True
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return False


def _rule(config: PolicyRuleConfig) -> _Rule:
    return _Rule(
        name=config.name,
        tools=_globs(config.tools),
        principals=_globs(config.principals),
        condition=compile_condition(config.when) if config.when is not None else None,
        message=config.message,
    )


def _globs(globs: list[str] | None) -> re.Pattern[str]:
    if globs is None:
        return _ANY
    return re.compile("|".join(f"(?:{fnmatch.translate(g)})" for g in globs))


def _key_parts(rules: tuple[_Rule, ...]) -> tuple[bool, frozenset[str] | str, bool]:
    """Whether listings depend on the principal, which claims ("all": every one), the scopes."""
    principal = claims_all = scopes = False
    claim_names: set[str] = set()
    for rule in rules:
        principal = principal or rule.principals is not _ANY
        condition = rule.condition
        if condition is None:
            continue
        principal = principal or "principal" in condition.variables
        scopes = scopes or "scopes" in condition.variables
        if "claims" in condition.variables:
            if condition.claim_names is None:
                claims_all = True
            else:
                claim_names |= condition.claim_names
    return principal, "all" if claims_all else frozenset(claim_names), scopes


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


NO_POLICY = Policy(PolicyConfig())
