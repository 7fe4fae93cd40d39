"""The Dex MCP conventions as pure rules: keys, answers, effects, outcomes and names.

Imports nothing of the rest of the gateway, and of MCP only the protocol's constants
(`mcp_types` error codes), so every layer (the agent host too) can use it.
"""

from .answers import Answer
from .effects import (
    Classification,
    ToolPolicy,
    classify_tool,
    listed_tool_classification,
    publish_annotations,
    publish_tool_meta,
)
from .keys import (
    APPROVAL_KEY,
    APPROVAL_RECOMMENDED,
    DECLARABLE_EFFECTS,
    DEX_PREFIX,
    EFFECT_KEY,
    GATEWAY_PREFIX,
    IDEMPOTENCY_KEY,
    MCP_RESERVED_PREFIX,
    OUTCOME_KEY,
    REPLAYED_KEY,
    Effect,
    Outcome,
)
from .naming import MAX_NAME_LENGTH, connector_tool_name, exposed_tool_name, sanitize, snake_case
from .outcomes import (
    MAX_ATTEMPTS,
    AttemptEvent,
    Interrupted,
    NotSent,
    Replied,
    RpcError,
    SendAgain,
    attempts_for,
    outcome_of,
    rejected,
    resolve_attempt,
    unknown,
)

__all__ = [
    # keys
    "APPROVAL_KEY",
    "APPROVAL_RECOMMENDED",
    "DECLARABLE_EFFECTS",
    "DEX_PREFIX",
    "EFFECT_KEY",
    "GATEWAY_PREFIX",
    "IDEMPOTENCY_KEY",
    "MCP_RESERVED_PREFIX",
    "OUTCOME_KEY",
    "REPLAYED_KEY",
    "Effect",
    "Outcome",
    # answers
    "Answer",
    # effects
    "Classification",
    "ToolPolicy",
    "classify_tool",
    "listed_tool_classification",
    "publish_annotations",
    "publish_tool_meta",
    # outcomes
    "MAX_ATTEMPTS",
    "AttemptEvent",
    "Interrupted",
    "NotSent",
    "Replied",
    "RpcError",
    "SendAgain",
    "attempts_for",
    "outcome_of",
    "rejected",
    "resolve_attempt",
    "unknown",
    # naming
    "MAX_NAME_LENGTH",
    "connector_tool_name",
    "exposed_tool_name",
    "sanitize",
    "snake_case",
]
