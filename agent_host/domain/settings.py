"""Per-session settings: the model, its parameters, tool policies, compaction and spend limits.

Stored with the session (`sessions.settings`, JSON) and copied onto each turn when it starts, so
a running turn — and its resume after a crash — keeps the settings it started with; a change
takes effect with the next turn. Set them with `dex-agent sessions set` (or flags on the first
`run`/`chat` of a session). Never put a secret here: the settings are shown by `sessions show`.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gateway.conventions.keys import Effect

MAX_SETTINGS_BYTES = 16 * 1024
DEFAULT_CONTEXT_WINDOW_TOKENS = 128_000
DEFAULT_TRIGGER_RATIO = 0.85
DEFAULT_RETAINED_RATIO = 0.3


class ToolPolicySetting(BaseModel):
    """A session's policy for one tool: it may raise the tool's effect, never lower it; its
    `requires_approval`, when set, wins."""

    model_config = ConfigDict(extra="forbid")

    effect: Effect | None = None
    requires_approval: bool | None = None


class SessionSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    # The session's system instructions (None: the host's); `POST /sessions` sets them.
    instructions: str | None = Field(default=None, max_length=8_000)
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, ge=1)
    tool_policies: dict[str, ToolPolicySetting] = Field(default_factory=dict)
    # Compaction: the model's context window, and at which share of it the history is summarised.
    context_window_tokens: int | None = Field(default=None, ge=1000)
    compaction_trigger_ratio: float | None = Field(default=None, gt=0, lt=1)
    compaction_retained_ratio: float | None = Field(default=None, gt=0, lt=1)
    # Spend limits, checked before each model call; cost needs both prices (per million tokens).
    max_turn_tokens: int | None = Field(default=None, ge=1)
    max_session_tokens: int | None = Field(default=None, ge=1)
    max_turn_cost: float | None = Field(default=None, gt=0)
    max_session_cost: float | None = Field(default=None, gt=0)
    input_price_per_mtok: float | None = Field(default=None, ge=0)
    output_price_per_mtok: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _consistent(self) -> "SessionSettings":
        if (self.max_turn_cost is not None or self.max_session_cost is not None) and not self.priced:
            raise ValueError("a cost limit needs input_price_per_mtok and output_price_per_mtok")
        trigger, retained = self.trigger_ratio, self.retained_ratio
        if retained >= trigger:
            raise ValueError("compaction_retained_ratio must be below compaction_trigger_ratio")
        if len(self.to_json()) > MAX_SETTINGS_BYTES:
            raise ValueError(f"session settings are limited to {MAX_SETTINGS_BYTES} bytes of JSON")
        return self

    @property
    def priced(self) -> bool:
        return self.input_price_per_mtok is not None and self.output_price_per_mtok is not None

    @property
    def context_window(self) -> int:
        return self.context_window_tokens or DEFAULT_CONTEXT_WINDOW_TOKENS

    @property
    def trigger_ratio(self) -> float:
        return self.compaction_trigger_ratio or DEFAULT_TRIGGER_RATIO

    @property
    def retained_ratio(self) -> float:
        return self.compaction_retained_ratio or DEFAULT_RETAINED_RATIO

    def cost(self, input_tokens: int, output_tokens: int) -> float | None:
        if not self.priced:
            return None
        assert self.input_price_per_mtok is not None and self.output_price_per_mtok is not None
        return (input_tokens * self.input_price_per_mtok + output_tokens * self.output_price_per_mtok) / 1_000_000

    def stored(self) -> dict[str, Any]:
        """What goes into the store: only what was set."""
        return self.model_dump(mode="json", exclude_none=True, exclude_defaults=True)

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json", exclude_none=True, exclude_defaults=True), separators=(",", ":"))

    @classmethod
    def of(cls, stored: dict[str, Any] | None) -> "SessionSettings":
        return cls.model_validate(stored or {})

    def merged(self, changes: dict[str, Any], unset: list[str] | tuple[str, ...] = ()) -> "SessionSettings":
        """These settings with `changes` applied and the fields in `unset` cleared (validated)."""
        data = self.stored()
        for name in unset:
            data.pop(name, None)
        policies = dict(data.get("tool_policies", {}))
        policies.update(changes.pop("tool_policies", {}) or {})
        data.update(changes)
        if policies:
            data["tool_policies"] = {k: v for k, v in policies.items() if v is not None}
        return SessionSettings.model_validate(data)


def apply_policy(effect: Effect, requires_approval: bool, policy: ToolPolicySetting | None) -> tuple[Effect, bool]:
    """A listed tool's effect and approval under a session policy, by the rule the gateway applies
    to declared tools (`gateway.conventions.effects`): the more conservative effect wins, and the
    policy's approval, when set, wins; otherwise the call asks when the tool recommends it or the
    policy's effect asks by default."""
    if policy is None:
        return effect, requires_approval
    merged = effect if policy.effect is None else Effect.most_conservative(effect, policy.effect)
    if policy.requires_approval is not None:
        return merged, policy.requires_approval
    return merged, requires_approval or (policy.effect is not None and policy.effect.asks_by_default)


def parse_policy(spec: str) -> tuple[str, ToolPolicySetting | None]:
    """`NAME=EFFECT[,approval|,no-approval]` or `NAME=` (remove the policy) from the command line."""
    name, sep, rest = spec.partition("=")
    if not sep or not name.strip():
        raise ValueError(f"--tool-policy {spec!r}: expected NAME=EFFECT[,approval|,no-approval] or NAME= to remove")
    if not rest.strip():
        return name.strip(), None
    effect: Effect | None = None
    approval: bool | None = None
    for part in (p.strip() for p in rest.split(",") if p.strip()):
        if part in ("approval", "no-approval"):
            approval = part == "approval"
        elif part in {e.value for e in Effect}:
            effect = Effect(part)
        else:
            raise ValueError(
                f"--tool-policy {spec!r}: {part!r} is not an effect ({', '.join(e.value for e in Effect)}) "
                "nor approval / no-approval"
            )
    return name.strip(), ToolPolicySetting(effect=effect, requires_approval=approval)


def resolve_settings(current: dict[str, Any], changes: dict[str, Any], unset: list[str] | None = None) -> SessionSettings:
    """`current` with the changes; ValueError (one line) when they are not valid settings."""
    try:
        return SessionSettings.of(current).merged(dict(changes), unset or [])
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"invalid session settings: {where + ': ' if where else ''}{first['msg']}") from None
