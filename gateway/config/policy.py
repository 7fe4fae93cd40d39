"""`policy:` in gateway.yaml: rules over the call (docs/policy.md), checked at load.

    policy:
      rules:
        - name: no-large-refunds          # unique; in the log and the metric of each denial
          tools: ["billing__refund"]      # exposed-name globs (optional: every tool)
          principals: ["agent-*"]         # principal globs (optional: every principal)
          when: "arguments.amount > 5000" # a CEL condition (optional: always)
          effect: deny                    # deny, or require_approval (held for a person: docs/approvals.md)
          message: "refunds over 5,000 need finance"   # for the log; a denied caller sees an unknown tool

The rules are global; a rule limited to some principals names them in `principals` or tests
`principal`, `claims` or `scopes` in `when`. A rule matches when every condition it has holds; one
matching `deny` rule refuses the call; a matching `require_approval` rule holds it for a person's
decision at the gateway (docs/approvals.md).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from .expressions import ExpressionError, compile_condition
from .strict import Strict

__all__ = ["PolicyConfig", "PolicyRuleConfig"]


class PolicyRuleConfig(Strict):
    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.:-]+$")
    # Exposed tool names (fnmatch globs, case-sensitive). None: every tool.
    tools: list[str] | None = Field(None, min_length=1)
    # Principal names (globs). None: every principal.
    principals: list[str] | None = Field(None, min_length=1)
    # A CEL condition over tool, upstream, arguments, principal, claims, scopes. None: always.
    when: str | None = Field(None, min_length=1)
    effect: Literal["deny", "require_approval"]
    # For the operator's log (and, with require_approval, the person deciding): never sent to a
    # denied caller, who is answered as for an unknown tool.
    message: str | None = None

    @field_validator("when")
    @classmethod
    def _compiles(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                compile_condition(v)
            except ExpressionError as exc:
                raise ValueError(str(exc)) from None
        return v

    @model_validator(mode="after")
    def _has_a_condition(self) -> "PolicyRuleConfig":
        if self.tools is None and self.principals is None and self.when is None:
            raise ValueError(f"rule {self.name!r} has none of tools, principals or when: it would apply to every "
                             "call; limit it with at least one of them")
        return self


class PolicyConfig(Strict):
    rules: list[PolicyRuleConfig] = Field(default_factory=list)
