"""Effect and approval of a tool (SPEC section 3), and what the gateway publishes for it.

Pure rules: no I/O, no MCP types. Inputs are wire dicts (camelCase annotations, `_meta`
mappings) so the same functions serve upstream listings, connectors and the `check` CLI.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..protocol import JsonObject, Meta
from .keys import APPROVAL_KEY, APPROVAL_RECOMMENDED, DECLARABLE_EFFECTS, EFFECT_KEY, Effect

READ_ONLY_HINT = "readOnlyHint"
IDEMPOTENT_HINT = "idempotentHint"
DESTRUCTIVE_HINT = "destructiveHint"
OPEN_WORLD_HINT = "openWorldHint"


@dataclass(frozen=True)
class ToolPolicy:
    """An operator's `tool_policies` entry for one exposed tool; None means "not set"."""

    effect: Effect | None = None
    requires_approval: bool | None = None


@dataclass(frozen=True)
class Classification:
    """The resolved effect and approval of one tool, and why the caller should warn."""

    effect: Effect
    requires_approval: bool
    declared: bool
    # The caller logs these once per listing, with the server and tool name it knows.
    warnings: tuple[str, ...] = ()


def classify_tool(
    meta: Mapping[str, Any] | None,
    annotations: Mapping[str, Any] | None,
    *,
    trusts_annotations: bool = True,
    default_effect: Effect = Effect.UNCLASSIFIED,
    policy: ToolPolicy | None = None,
) -> Classification:
    """Resolve a tool's effect and approval from its upstream definition and the policy."""
    policy = policy or ToolPolicy()
    # An untrusted upstream's keys and annotations are both ignored (SPEC 3, rule 3).
    meta = (meta or {}) if trusts_annotations else {}
    annotations = (annotations or {}) if trusts_annotations else {}

    if EFFECT_KEY not in meta:
        effect = _first(policy.effect, _effect_from_annotations(annotations), default_effect)
        return _undeclared(effect, policy, ())

    declared = _declared_effect(meta[EFFECT_KEY])
    if declared is None:
        # An invalid value poisons the annotations too: the tool said something we cannot read.
        warning = (
            f"ignored {EFFECT_KEY} value {meta[EFFECT_KEY]!r:.80} and the annotations:"
            f" not one of {', '.join(sorted(DECLARABLE_EFFECTS))}"
        )
        return _undeclared(_first(policy.effect, default_effect), policy, (warning,))
    return _declared(declared, APPROVAL_KEY in meta, policy)


def listed_tool_classification(
    meta: Mapping[str, Any] | None, annotations: Mapping[str, Any] | None = None
) -> Classification:
    """Effect and approval of a tool in a server's tools/list, as a Dex client reads them (the
    agent host from the gateway's listing, `check` from any server's): the keys, else the
    annotations, else unclassified; no operator policy."""
    return classify_tool(meta, annotations)


def _first(*effects: Effect | None) -> Effect:
    return next(e for e in effects if e is not None)


def _declared_effect(value: Any) -> Effect | None:
    """The effect a declared value names, or None when it is not one of the three."""
    if isinstance(value, str) and value in DECLARABLE_EFFECTS:
        return Effect(value)
    return None


def _effect_from_annotations(annotations: Mapping[str, Any]) -> Effect | None:
    # Only a JSON `true` counts: a hint is a claim of safety, so anything else is no claim.
    if annotations.get(READ_ONLY_HINT) is True:
        return Effect.READ
    if annotations.get(IDEMPOTENT_HINT) is True:
        return Effect.IDEMPOTENT_WRITE
    return None


def _undeclared(effect: Effect, policy: ToolPolicy, warnings: tuple[str, ...]) -> Classification:
    asks = _policy_approval(policy, effect.asks_by_default)
    return Classification(effect, asks, declared=False, warnings=warnings)


def _declared(declared: Effect, has_approval_key: bool, policy: ToolPolicy) -> Classification:
    warnings: tuple[str, ...] = ()
    effect = declared
    if policy.effect is not None:
        # A policy may keep or raise a declared tool's safety, never lower it.
        effect = Effect.most_conservative(declared, policy.effect)
        if policy.effect.rank < declared.rank:
            warnings = (
                f"policy effect {policy.effect.value} is lower than the declared {declared.value};"
                f" kept {declared.value}",
            )
    # Any approval value, null included, asks: unknown values fail closed.
    policy_effect_asks = policy.effect is not None and policy.effect.asks_by_default
    asks = _policy_approval(policy, has_approval_key or policy_effect_asks)
    return Classification(effect, asks, declared=True, warnings=warnings)


def _policy_approval(policy: ToolPolicy, otherwise: bool) -> bool:
    return policy.requires_approval if policy.requires_approval is not None else otherwise


def publish_tool_meta(upstream_meta: Mapping[str, Any] | None, c: Classification) -> Meta:
    """The tool's `_meta` in the gateway's tools/list: upstream entries plus the resolved keys."""
    published = {k: v for k, v in (upstream_meta or {}).items() if k not in (EFFECT_KEY, APPROVAL_KEY)}
    if c.effect.declared_value is not None:
        published[EFFECT_KEY] = c.effect.declared_value
    if c.requires_approval:
        published[APPROVAL_KEY] = APPROVAL_RECOMMENDED
    return published


def publish_annotations(
    upstream_annotations: Mapping[str, Any] | None, c: Classification, *, trusted: bool
) -> JsonObject:
    """Annotations that make an annotations-only client derive the same effect as the keys.

    The two hints that classify are always the gateway's own. From an untrusted upstream only
    hints that ask for more caution (`true`) pass; a `false` would be an unvetted safety claim.
    """
    published = {
        k: v
        for k, v in (upstream_annotations or {}).items()
        if k not in (READ_ONLY_HINT, IDEMPOTENT_HINT) and (trusted or not _is_unvetted_safety_claim(k, v))
    }
    if c.effect is Effect.READ:
        # destructiveHint only means something for a tool that writes.
        published.pop(DESTRUCTIVE_HINT, None)
        published[READ_ONLY_HINT] = True
        return published
    published[READ_ONLY_HINT] = False
    published[IDEMPOTENT_HINT] = c.effect is Effect.IDEMPOTENT_WRITE
    return published


def _is_unvetted_safety_claim(key: str, value: Any) -> bool:
    # Both hints default to true in MCP; only an explicit non-true value lowers caution.
    return key in (DESTRUCTIVE_HINT, OPEN_WORLD_HINT) and value is not True
