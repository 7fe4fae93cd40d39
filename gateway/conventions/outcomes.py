"""Outcome of a call (SPEC section 3): what one attempt's event means for the caller.

`resolve_attempt` turns what happened on one attempt into the answer the gateway records and
returns, or into `SendAgain` when the same request (same idempotency key) may go upstream
again. `rejected` and `unknown` are the only way gateway code writes a Dex outcome itself.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from mcp_types import INTERNAL_ERROR

from .answers import Answer
from .keys import OUTCOME_KEY, Effect, Outcome

log = logging.getLogger(__name__)

# Attempts of one call that may be sent again (read, idempotent_write), the same key on each.
MAX_ATTEMPTS = 3
MAY_HAVE_TAKEN_EFFECT = "The call may have taken effect; check before calling it again."


@dataclass(frozen=True)
class Replied:
    """The upstream answered with a tools/call result (wire form)."""

    answer: Answer


@dataclass(frozen=True)
class RpcError:
    """The upstream answered with a JSON-RPC error; `data` is `error.data` as received."""

    code: int
    message: str
    data: Any = None


@dataclass(frozen=True)
class NotSent:
    """Nothing left the gateway: server not configured, every connection attempt failed."""

    reason: str


@dataclass(frozen=True)
class Interrupted:
    """Sent, then no readable answer: connection broke, process exited, timeout, HTTP error
    status or unreadable body. The upstream may have run the call."""

    reason: str


AttemptEvent: TypeAlias = Replied | RpcError | NotSent | Interrupted


@dataclass(frozen=True)
class SendAgain:
    """Send the same request again, with the same idempotency key."""

    reason: str


def attempts_for(effect: Effect) -> int:
    """How many times a call of this effect may be sent: MAX_ATTEMPTS when an interrupted
    attempt may be sent again with the same key, else one."""
    return MAX_ATTEMPTS if effect.resendable else 1


def rejected(text: str) -> Answer:
    """A gateway answer that failed without effect (keyless write, key reused, ...)."""
    return Answer.error_text(text, Outcome.REJECTED)


def unknown(text: str) -> Answer:
    """A gateway answer whose effect is unknown; the text always says it may have happened."""
    if "may have taken effect" not in text.lower():
        text = f"{text.rstrip()} {MAY_HAVE_TAKEN_EFFECT}".lstrip()
    return Answer.error_text(text, Outcome.UNKNOWN)


def rpc_error_text(code: int, message: str) -> str:
    return f"MCP error {code}: {message}"


def resolve_attempt(
    tool: str,
    effect: Effect,
    attempt: int,
    event: AttemptEvent,
    *,
    max_attempts: int = MAX_ATTEMPTS,
) -> Answer | SendAgain:
    """The answer for attempt number `attempt` (from 1) of a call to `tool`, or SendAgain."""
    if attempt < 1 or max_attempts < 1:
        raise ValueError(f"attempt ({attempt}) and max_attempts ({max_attempts}) count from 1")
    match event:
        case Replied(answer):
            return _resolve_reply(tool, answer)
        case RpcError(code, message, data):
            return _resolve_rpc_error(tool, effect, attempt, max_attempts, code, message, data)
        case NotSent(reason):
            return _resolve_not_sent(tool, effect, attempt, reason)
        case Interrupted(reason):
            return _resolve_interrupted(tool, effect, attempt, max_attempts, reason)
    raise TypeError(f"not an attempt event: {event!r}")


def outcome_of(tool: str, meta: Mapping[str, Any] | None) -> Outcome | None:
    """The Dex outcome in a result's or error's `_meta`; reserved values are warned about and
    ignored, so they never change how the call is recorded."""
    if not isinstance(meta, Mapping) or OUTCOME_KEY not in meta:
        return None
    value = meta[OUTCOME_KEY]
    if (outcome := Outcome.of(value)) is not None:
        return outcome
    log.warning("tool %s: ignored reserved %s value %.80r", tool, OUTCOME_KEY, value)
    return None


def _resolve_reply(tool: str, answer: Answer) -> Answer:
    if outcome_of(tool, answer.meta) is None or answer.is_error:
        return answer  # success or plain failure: passed on as the upstream said it
    # The key wins over isError: a client that knows no conventions must not read success.
    return Answer(answer.content, answer.structured_content, True, answer.meta)


def _resolve_rpc_error(
    tool: str, effect: Effect, attempt: int, max_attempts: int, code: int, message: str, data: Any
) -> Answer | SendAgain:
    text = rpc_error_text(code, message)
    meta = data.get("_meta") if isinstance(data, Mapping) else None
    outcome = outcome_of(tool, meta)
    if outcome is not None:
        # The key wins over the code, -32603 included: never sent again.
        return Answer.error_text(text, outcome, dict(meta or {}))
    if code == INTERNAL_ERROR:
        # A gateway in front may return -32603 after the server ran the call.
        return _resolve_interrupted(tool, effect, attempt, max_attempts, text)
    return Answer.error_text(text)


def _resolve_not_sent(tool: str, effect: Effect, attempt: int, reason: str) -> Answer:
    if attempt > 1:
        # Only an interrupted attempt leads to another one, so an earlier attempt was sent:
        # "did not run" would be false, and a write may have taken effect.
        return _give_up(
            effect,
            f"The call to {tool} was interrupted after it was sent,"
            f" then attempt {attempt} could not be sent: {reason}.",
        )
    return Answer.error_text(
        f"The tool {tool} did not run: {reason}. Nothing was sent, so it is safe to call it again."
    )


def _resolve_interrupted(
    tool: str, effect: Effect, attempt: int, max_attempts: int, reason: str
) -> Answer | SendAgain:
    if effect.resendable and attempt < max_attempts:
        return SendAgain(reason)
    if effect.resendable:
        return _give_up(effect, f"The call to {tool} was interrupted on {_every(attempt)}: {reason}.")
    return _give_up(effect, f"The call to {tool} was interrupted after it was sent: {reason}.")


def _give_up(effect: Effect, text: str) -> Answer:
    """The final answer when the last attempt ended without a readable answer."""
    if effect is Effect.READ:
        # A read changed nothing, so running out of attempts is a plain failure.
        return Answer.error_text(text)
    return unknown(text)


def _every(attempts: int) -> str:
    return "its only attempt" if attempts == 1 else f"all {attempts} attempts"
