"""The approval stage of the tail (docs/approvals.md): a call that needs a person's decision is
held here, before the fence claims its key and before anything is sent.

A call needs approval when a `require_approval` policy rule matches it (for every principal: a
per-call rule cannot be published in a listing), or when its tool asks for approval (its effect,
`approval: recommended`, or the operator's `requires_approval`) and the caller's principal has
`approvals: gateway`. Who decides:

* the client's user, when the client can be asked: `elicitation/create` on a 2025-11-25 session
  whose client declared elicitation, or an `input_required` round (an accept/decline form) for a
  2026-07-28 client that declared it; the text is the approval's card, built from the call;
* otherwise an approver (/admin/approvals, `dex-gateway approvals decide`), while the call waits
  `approvals.wait_seconds` (a task's call waits until the approval's deadline).

The decision is stored before the call runs; a retry with the same key finds it and does not ask
again. `ToolCall.approval` says who decided, how and when; allowed: the call goes on.
Denied: `rejected` "approval denied"; past the deadline: `rejected` "approval deadline passed".
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import anyio

from ..approvals.records import Approval, ApprovalState, Channel, arguments_digest
from ..approvals.service import Approvals, Decided
from ..auth.policy import Policy
from ..conventions.answers import Answer
from ..conventions.outcomes import rejected
from ..errors import RelayRefused
from ..protocol import Era
from .catalog import ToolRoute
from .stages import ToolCall
from .telemetry import NO_CALL_TELEMETRY, CallTelemetry

__all__ = ["APPROVAL_INPUT", "APPROVAL_STATE_PREFIX", "ApprovalStage"]

logger = logging.getLogger(__name__)

APPROVAL_STATE_PREFIX = "dex-gateway.approval."
APPROVAL_INPUT = "dex-gateway.approval"
_EMPTY_FORM = {"type": "object", "properties": {}}


class ApprovalStage:
    def __init__(self, approvals: Approvals, policy: Policy, telemetry: CallTelemetry = NO_CALL_TELEMETRY, *,
                 reuse_seconds: float = 24 * 3600) -> None:
        """`reuse_seconds`: how long after its decision an allowed approval lets a retry with its key
        through (the fences' retention: past it a retry is a new call, which needs a new key)."""
        self.approvals = approvals
        self._policy = policy
        self._reuse_seconds = reuse_seconds
        self._telemetry = telemetry  # dex_gateway_approvals_total{state, channel}

    def needs(self, route: ToolRoute, call: ToolCall) -> str | None:
        """Why the call needs a person's decision (for the card), or None."""
        rule = self._policy.approval(call.identity, route.name, route.upstream, call.arguments)
        if rule is not None:
            why = f"policy rule {rule.rule!r}"
            if rule.reason == "error":
                return f"{why} (it could not be evaluated for this call, so the call is held)"
            return f"{why}: {rule.message}" if rule.message else why
        if call.identity.approvals == "gateway" and route.classification.requires_approval:
            return f"the tool is a {route.effect.value} tool that asks for approval"
        return None

    async def hold(self, route: ToolRoute, call: ToolCall) -> tuple[ToolCall, Answer | None]:
        """The call to go on with (its `approval` set, an approval round's keys taken off), and None;
        or the call's answer: rejected, or an `input_required` round for a 2026-07-28 client."""
        why = self.needs(route, call)
        if why is None:
            return call, None
        try:
            return await self._hold(route, call, why)
        except self.approvals.store.transient_errors:
            logger.warning("tools/call %s: the approvals store was busy or failing; not sent", route.name, exc_info=True)
            return call, rejected(f"The tool {route.name} was not run: the gateway's store was busy while the call "
                                  "waited for approval. Nothing was done: send it again with the same idempotency key.")

    async def _hold(self, route: ToolRoute, call: ToolCall, why: str) -> tuple[ToolCall, Answer | None]:
        key = call.idempotency_key
        try:
            approval = await self.approvals.open_for(principal=call.principal, tool=route.name, upstream=route.upstream,
                                                     arguments=call.arguments, key=key, why=why)
        except ValueError as exc:
            return call, rejected(f"The tool {route.name} was not run: its arguments are not valid JSON ({exc}).")
        if approval.arguments_digest != arguments_digest(call.arguments):
            return call, rejected(
                f"The tool {route.name} was not run: the idempotency key {key!r} was already used for another call "
                "waiting for approval (other arguments). Use a new key for a new call.")
        answered = _round_answer(call.rounds, approval.id)
        if _is_approval_round(call.rounds):  # the round's keys are the gateway's: never sent upstream
            call = replace(call, rounds={k: v for k, v in call.rounds.items() if k not in ("inputResponses", "requestState")})
        if answered is not None:
            approval, _ = await self.approvals.decide(approval.id, answered, by=f"the user of {call.principal}",
                                                      channel=Channel.INPUT_REQUIRED.value)
        elif approval.state_at(self.approvals.clock()) is ApprovalState.PENDING:
            asked = await self._ask(route, call, approval)
            if isinstance(asked, Answer):
                return call, asked
            approval = asked
        return self._settled(route, call, approval)

    async def _ask(self, route: ToolRoute, call: ToolCall, approval: Approval) -> Approval | Answer:
        relay = call.relay
        task = call.sink is not None
        asks = not task and relay is not None and "elicitation" in relay.client_capabilities()
        params = {"message": approval.card, "requestedSchema": _EMPTY_FORM}
        if asks and call.era is Era.MODERN:
            return Answer(input_required={
                "resultType": "input_required",
                "inputRequests": {APPROVAL_INPUT: {"method": "elicitation/create", "params": params}},
                "requestState": APPROVAL_STATE_PREFIX + approval.id,
            })
        if asks and relay is not None and not relay.modern:
            response: dict[str, Any] | None = None
            with anyio.move_on_after(max(0.0, approval.expires_at - self.approvals.clock())):
                try:
                    response = await relay.request("elicitation/create", params)
                except RelayRefused as exc:
                    logger.info("approval %s: the client could not be asked (%s); waiting for an approver",
                                approval.id, exc.message)
            if response is not None:
                decided, _ = await self.approvals.decide(
                    approval.id, response.get("action") == "accept", by=f"the user of {call.principal}",
                    channel=Channel.ELICITATION.value)
                return decided
        logger.info("tools/call %s by %s: held for an approver (approval %s)", route.name, call.principal, approval.id)
        wait = approval.expires_at if task else self.approvals.clock() + self.approvals.config.wait_seconds
        return await self.approvals.wait(approval.id, min(wait, approval.expires_at))

    def _settled(self, route: ToolRoute, call: ToolCall, approval: Approval) -> tuple[ToolCall, Answer | None]:
        """The call with its decision (`call.approval`, whatever it is), and None when it was allowed,
        else its rejection."""
        decided = Decided.of(approval, self.approvals.clock())
        call = replace(call, approval=decided)
        self._telemetry.approval_settled(decided.state.value, decided.channel)
        if decided.state is ApprovalState.ALLOWED and (decided.decided_at or 0.0) + self._reuse_seconds < self.approvals.clock():
            # Single use: the call it allowed is past the fences' retention, so this key cannot be
            # told apart from a new call; a new call asks again under a new key.
            return call, rejected(
                f"The tool {route.name} was not run: its approval (approval {approval.id}) was given longer ago than "
                "the gateway keeps calls' answers. To run the call again, send it with a new idempotency key.")
        if decided.state is ApprovalState.ALLOWED:
            logger.info("tools/call %s by %s: approved by %s (%s)", route.name, call.principal, approval.decided_by,
                        approval.channel)
            return call, None
        if decided.state is ApprovalState.DENIED:
            reason = f" ({approval.reason})" if approval.reason else ""
            return call, rejected(f"The tool {route.name} was not run: approval denied{reason}.")
        if decided.state is ApprovalState.EXPIRED:
            return call, rejected(f"The tool {route.name} was not run: approval deadline passed.")
        if call.idempotency_key is None:
            return call, rejected(
                f"The tool {route.name} was not run: no approver decided while it waited (approval {approval.id}). "
                "A call without an idempotency key cannot pick up a later decision: send it with a key.")
        return call, rejected(
            f"The tool {route.name} was not run: it is waiting for an approver's decision (approval {approval.id}). "
            "Send the call again with the same idempotency key to get its result once it is decided.")


def _is_approval_round(rounds: Mapping[str, Any]) -> bool:
    state = rounds.get("requestState")
    return isinstance(state, str) and state.startswith(APPROVAL_STATE_PREFIX)


def _round_answer(rounds: Mapping[str, Any], approval_id: str) -> bool | None:
    """A 2026-07-28 client's answer to this approval's round: accept (True), anything else (False),
    or None when the call is not that round."""
    if rounds.get("requestState") != APPROVAL_STATE_PREFIX + approval_id:
        return None
    responses = rounds.get("inputResponses")
    answer = responses.get(APPROVAL_INPUT) if isinstance(responses, Mapping) else None
    return isinstance(answer, Mapping) and answer.get("action") == "accept"
