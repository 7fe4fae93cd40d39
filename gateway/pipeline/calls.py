"""The tools/call pipeline, the one path every entry shares:

    route (once) -> parking (a 2026-07-28 client's call to an upstream that asks on the handshake era,
          or inside an upstream task the gateway follows)
          -> tasks (the task stage: a task created, or the call runs plain) -> the tail -> the round rule
          -> TaskCreated | Answered | InputRound (gateway/pipeline/stages.py)

    route: the catalog's tool, the principal's scope, then the policy's deny rules
          (gateway/auth/policy.py): a tool out of scope or denied is answered as an unknown tool,
          before anything is claimed or sent

    the tail: rate limit -> approval (a call a person must allow is held: gateway/pipeline/approval.py)
          -> a write without a key refused -> fence (claim / replay / unknown) -> dispatch (attempts, with a
          jittered wait before each re-send) -> check the upstream result -> outcome
          -> media (images -> references) -> result size limit -> fence (store) -> Answer

The round rule: an upstream's `input_required` round goes to a 2026-07-28 client as it is; a
handshake-era client gets a failed result instead (gateway/pipeline/rounds.py holds rounds and parking).

Telemetry (gateway/pipeline/telemetry.py) wraps the call after the rate limit (a span, the metrics)
and each upstream attempt (its span).

Each stage lives in its own module; this one only strings them together in the order of the
diagram in docs/architecture.md. The front turns the result into the wire dict of its era
(gateway/front/wire.py), whichever entry took the request.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import anyio
from mcp_types import INVALID_PARAMS, INVALID_REQUEST, MISSING_REQUIRED_CLIENT_CAPABILITY

from .catalog import Catalog, ToolRoute
from ..conventions.answers import Answer, Dispatched
from ..conventions.keys import IDEMPOTENCY_KEY, MCP_RESERVED_PREFIX, Effect, Outcome
from ..conventions.outcomes import (
    AttemptEvent,
    Interrupted,
    NotSent,
    Replied,
    RpcError,
    SendAgain,
    rejected,
    resolve_attempt,
    unknown,
)
from ..errors import (
    InputNotProvided,
    InvalidResult,
    ToolHeldForReview,
    UnknownToolError,
    UpstreamAnswerTooLarge,
    UpstreamError,
    UpstreamInterrupted,
    UpstreamNotSent,
    UpstreamRefusedRequest,
    UpstreamRpcError,
)
from .limits import answer_over_cap, over_result_limit
from ..media.stage import MediaStage
from ..media.validation import ImageRules
from ..fences import FenceRejected, Fences, FenceUnknown, Proceed, Replay, Ticket
from ..auth.policy import NO_POLICY, Policy
from ..auth.principals import ANONYMOUS, Identity
from .approval import ApprovalStage
from .ratelimits import NO_LIMITS, RateLimits
from ..upstreams.relay import CallRelay
from ..auth.scope import PrincipalScope
from ..protocol import Era, client_takes_tasks
from .rounds import ROUND_KEYS, Parking, answer_rounds, not_provided_text, unanswerable
from .stages import Answered, CallResult, InputRound, Request, TaskCreated, TaskStage, ToolCall, UpstreamTaskRequests
from ..upstreams.results import answer_from_result
from .telemetry import NO_CALL_TELEMETRY, CallTelemetry, fence_state
from .audit import NO_AUDIT, CallAudit, WriteNote
from ..upstreams.upstream import Upstream, resend_delay

__all__ = [
    "CallPipeline", "STORE_BUSY_TEXT", "forwardable_meta", "refuses_request", "scoped_key",
]

logger = logging.getLogger(__name__)

# Keys of the client's request _meta that belong to the client->gateway hop only.
_HOP_LOCAL_KEYS = frozenset({"progressToken"})


class CallPipeline:
    def __init__(
        self,
        catalog: Catalog,
        upstreams: Mapping[str, Upstream],
        fences: Fences,
        scope: PrincipalScope,
        *,
        max_result_bytes: int,
        media: MediaStage | None = None,
        upstream_tasks: UpstreamTaskRequests | None = None,
        telemetry: CallTelemetry = NO_CALL_TELEMETRY,
        limits: RateLimits = NO_LIMITS,
        parking: Parking | None = None,
        policy: Policy = NO_POLICY,
        audit: CallAudit = NO_AUDIT,
        approvals: ApprovalStage | None = None,
    ) -> None:
        self._catalog = catalog
        self._scope = scope
        self._policy = policy  # deny rules over the call (gateway/auth/policy.py)
        self._upstreams = upstreams
        self._fences = fences
        self._max_result_bytes = max_result_bytes
        # None: images are checked and pass inline (no media store).
        self._media = media or MediaStage(ImageRules())
        self._upstream_tasks = upstream_tasks
        self._telemetry = telemetry  # spans and metrics (gateway/pipeline/telemetry.py)
        self._limits = limits  # per principal and upstream (gateway/pipeline/ratelimits.py)
        # Questions of a handshake-era upstream asked of a 2026-07-28 client (gateway/pipeline/rounds.py).
        self._parking = parking
        self._tasks: TaskStage | None = None  # tasks on: set by add_task_stage
        self._audit = audit  # a row per write and per refused call (gateway/pipeline/audit.py)
        # Calls held for a person's decision before the fence (gateway/pipeline/approval.py).
        self._approvals = approvals

    def add_task_stage(self, stage: TaskStage) -> None:
        """The task stage (gateway/tasks/), made after the pipeline its tasks run their calls with."""
        self._tasks = stage

    async def call(self, call: ToolCall, *, parked: ToolRoute | None = None) -> CallResult:
        """What the front writes for one call. Raises UnknownToolError for a name the principal
        cannot reach, RequestError for a request the gateway refuses (RateLimited, ...).
        `parked`: the call's route, when parking (gateway/pipeline/rounds.py) runs it."""
        route = parked
        if route is None:
            route = await self._route(call)
            self._check_policy(route, call)
            parking = self._parking
            # Only a 2026-07-28 client that can answer is parked for its upstream's questions (may_ask):
            # every other call awaits nothing more here.
            if parking is not None and call.relay is not None and parking.takes(
                call.era, call.relay, call.rounds,
                upstream_may_ask=parking.may_ask(call.relay) and await self._upstream_may_ask(route, call),
            ):
                async def work(relay: CallRelay) -> CallResult:
                    return await self.call(replace(call, relay=relay), parked=route)

                result = await parking.round(call.principal, call.name, call.relay, call.rounds, work)
                return InputRound(result) if isinstance(result, dict) else result
        # The task stage, the tail, and the round rule.
        started = await self._tasks.start(route, call) if self._tasks is not None else None
        if isinstance(started, TaskCreated):
            return started
        answer = started if started is not None else await self.tail(route, call)
        if self._tasks is not None:
            answer = await self._tasks.resolve(call.principal, answer)
        if answer.input_required is None:
            return Answered(answer)
        if call.era is Era.MODERN:
            return InputRound(answer.to_wire())
        return Answered(unanswerable(call.name, answer))  # only a 2026-07-28 client takes a round

    async def _upstream_may_ask(self, route: ToolRoute, call: ToolCall) -> bool:
        """Whether the tool's upstream may ask the client something that only parking carries to a
        2026-07-28 caller (a 2026-07-28 upstream's own input_required results pass through), in a
        call that does not run as a gateway task (a client that takes tasks answers the task's
        questions): a handshake-era upstream (server-to-client requests); one that serves both eras
        and may take this caller's call on the handshake era (the era per caller,
        `Upstream.may_take_on_handshake`); or a 2026-07-28 upstream that may run the plain call as a
        task the gateway follows (its `inputRequests`, gateway/tasks/upstream.py)."""
        if route.upstream is None or client_takes_tasks(call.meta):
            return False  # a connector never asks
        upstream = self._upstreams.get(route.upstream)
        if upstream is None:
            return False
        if Era.of(upstream.protocol_version) is Era.HANDSHAKE:
            return True
        if self._upstream_tasks is not None and self._upstream_tasks.follows_task(upstream):
            return True
        return await upstream.may_take_on_handshake(call.relay, route.target)

    async def tail(self, route: ToolRoute, call: ToolCall, *, admitted: bool = False) -> Answer:
        """The answer of a routed call (the pipeline's tail): a read is sent, a write without a key
        refused (or passed), a keyed write fenced. `admitted`: the rate limit was already applied
        (a task's call: gateway/tasks/creation.py)."""
        if not admitted:
            await self._limits.admit(call.principal, route.upstream)
        with self._telemetry.call(route) as seen:
            call, held = await self._held(route, call)
            if held is not None:
                answer = held
            elif route.effect is Effect.READ:  # never fenced, never audited
                answer = (await self._dispatch(route, call, fence_id=None, takeover=False)).answer
            else:
                answer = await self._write(route, call)
            seen.answer = answer
        return answer

    async def _write(self, route: ToolRoute, call: ToolCall, *, settled: bool = False,
                     fence_id: str | None = None) -> Answer:
        """A write: fenced with its key, refused without one (or passed, `keyless_writes: pass`),
        and written to the audit log. `settled`: the call's fence is already settled (a task's)."""
        note = self._audit.begin() if self._audit.enabled else None
        try:
            key = call.idempotency_key
            if settled:
                if note is not None:
                    note.fence_state = "settled"
                answer = (await self._timed_dispatch(route, call, note, fence_id=fence_id)).answer
            elif key is not None:
                answer = await self._fenced(route, call, key, note)
            elif (refused := self.refusal(route, call)) is not None:
                if note is not None:
                    note.reason = "write without an idempotency key"
                answer = refused
            else:
                answer = (await self._timed_dispatch(route, call, note, fence_id=None)).answer
        except BaseException as exc:
            if note is not None:
                self._audit.failed(route, call, note, exc)
            raise
        if note is not None:
            self._audit.finish(route, call, note, answer)
            if self._audit.congested:
                await self._audit.backpressure()
        return answer

    async def _timed_dispatch(self, route: ToolRoute, call: ToolCall, note: WriteNote | None, *, fence_id: str | None,
                              takeover: bool = False) -> Dispatched:
        if note is None:
            return await self._dispatch(route, call, fence_id=fence_id, takeover=takeover)
        started = time.perf_counter()
        try:
            return await self._dispatch(route, call, fence_id=fence_id, takeover=takeover)
        finally:
            note.timed(time.perf_counter() - started)

    async def _held(self, route: ToolRoute, call: ToolCall) -> tuple[ToolCall, Answer | None]:
        """The approval stage: the call to go on with (`call.approval` set when a person allowed
        it), or its answer (rejected, or a 2026-07-28 client's approval round)."""
        if self._approvals is None:
            return call, None
        call, held = await self._approvals.hold(route, call)
        if held is not None and held.input_required is None:
            # Not run: denied, past its deadline, or still waiting for an approver (the client
            # sends it again with its key): a row with the decision, if any. A round of questions
            # is not the end of the call.
            self._audit.refused(route, call, held.text[:200] or "held for approval")
        return call, held

    async def admit(self, principal: str, route: ToolRoute) -> None:
        """Take the call's rate-limit tokens, or raise RateLimited (-32029: nothing may be sent)."""
        await self._limits.admit(principal, route.upstream)

    @staticmethod
    def refusal(route: ToolRoute, call: ToolCall) -> Answer | None:
        """The answer of a call the policy refuses before anything runs (a write without a key)."""
        if route.effect is Effect.READ or call.idempotency_key is not None or route.keyless_writes == "pass":
            return None
        return rejected(_missing_key_text(route))

    async def _route(self, call: ToolCall) -> ToolRoute:
        """The route of the called tool, if this principal may reach it (else: unknown tool)."""
        route = await self._catalog.tool(call.name)
        if route is None and (held := self._catalog.held(call.name)) is not None:
            withheld, text = held
            if self._scope.may_use_tool(call.principal, withheld.name, withheld.upstream):
                # Only a principal that may use it learns why: policy first (a denied principal
                # gets "unknown tool", as for any tool a rule denies).
                self._check_policy(withheld, call)
                self._audit.refused(withheld, call, "held for review (pinning: hold)")
                raise ToolHeldForReview(call.name, text)
        if route is None:
            raise UnknownToolError(call.name)
        if not self._scope.may_use_tool(call.principal, route.name, route.upstream):
            self._audit.refused(route, call, "out of the principal's scope")
            raise UnknownToolError(call.name)
        return route

    def _check_policy(self, route: ToolRoute, call: ToolCall) -> None:
        """Raise UnknownToolError when a deny rule refuses the call: answered exactly as a tool
        that does not exist, before any fence, task or upstream byte. A task taken over from a
        dead process is not checked again (`tail_settled`): its call was checked when it began."""
        if not self._policy.enabled:
            return
        denial = self._policy.denial(call.identity, route.name, route.upstream, call.arguments)
        if denial is None:
            return
        self._telemetry.policy_denied(denial.rule, denial.reason)
        self._audit.refused(route, call, f"policy rule {denial.rule!r}" + (
            " could not be evaluated (denied)" if denial.reason == "error" else ""))
        if denial.reason == "error":
            # Fail closed: a rule that cannot be evaluated for this call denies it.
            logger.warning("tools/call %s by %s: denied, policy rule %r could not be evaluated (%s)",
                           route.name, call.principal, denial.rule, denial.detail)
        else:
            logger.info("tools/call %s by %s: denied by policy rule %r%s", route.name, call.principal, denial.rule,
                        f" ({denial.message})" if denial.message else "")
        raise UnknownToolError(call.name)

    async def tail_settled(self, call: ToolCall, *, fence_id: str | None, route: ToolRoute | None = None) -> Answer:
        """A call whose fence is already settled (a task holds it: gateway/tasks/): the tail without
        the fence. Without `route` (a task taken over), raises UnknownToolError like `call`."""
        route = route or await self._route(call)
        with self._telemetry.call(route) as seen:
            call, held = await self._held(route, call)
            if held is not None:
                answer = held
            elif route.effect is Effect.READ:
                answer = (await self._dispatch(route, call, fence_id=fence_id, takeover=False)).answer
            else:
                answer = await self._write(route, call, settled=True, fence_id=fence_id)
            seen.answer = answer
        return answer

    async def _fenced(self, route: ToolRoute, call: ToolCall, key: str, note: WriteNote | None) -> Answer:
        try:
            decision = await self._fences.begin(
                principal=call.principal, key=key, tool=route.name, arguments=call.arguments, effect=route.effect
            )
        except ValueError as exc:
            # The fingerprint needs canonical JSON; NaN or infinities have none.
            if note is not None:
                note.reason = "arguments not valid JSON"
            return rejected(f"The tool {route.name} was not run: its arguments are not valid JSON ({exc}).")
        except self._fences.store.transient_errors:
            # Busy past its timeout (a purge, another process's long write) or out of resources:
            # nothing was claimed and nothing sent; the same key may be sent again as new.
            logger.warning("tools/call %s: the fence store was busy or failing; not sent", route.name, exc_info=True)
            if note is not None:
                note.reason = "the fence store was busy"
            return rejected(STORE_BUSY_TEXT)
        self._telemetry.fenced(route, decision)
        if note is not None:
            note.fence_state = fence_state(decision) or "none"
        match decision:
            case Replay():
                return Answer.from_wire(decision.answer)
            case FenceUnknown():
                return Answer.from_wire(decision.answer) if decision.answer else unknown(decision.text)
            case FenceRejected():
                return rejected(decision.text)
            case Proceed():
                return await self._claimed(route, call, decision.ticket, note)

    async def _claimed(self, route: ToolRoute, call: ToolCall, ticket: Ticket, note: WriteNote | None = None) -> Answer:
        # Shielded: once claimed, a call runs to its recorded end even if the client goes
        # away, so the client's retry gets the answer instead of an unknown.
        with anyio.CancelScope(shield=True):
            try:
                async with self._fences.holding(ticket):
                    dispatched = await self._timed_dispatch(route, call, note, fence_id=ticket.fence_id,
                                                            takeover=ticket.takeover)
            except UpstreamRefusedRequest:
                await self._fences.release(ticket)  # nothing ran: the client changes its request
                raise
            answer = dispatched.answer
            try:
                if not dispatched.sent or answer.input_required is not None:
                    # Not the call's answer (never sent, or a round of questions): the key stays free.
                    await self._fences.release(ticket)
                elif answer.outcome is Outcome.UNKNOWN:
                    await self._fences.mark_unknown(ticket, answer.to_wire())
                else:
                    await self._fences.complete(ticket, answer.to_wire())
            except self._fences.store.transient_errors:
                # The answer is known, only not stored: give it to the client. The fence stays
                # pending until its lease runs out; a retry is then answered by the fence rules.
                logger.error("tools/call %s: the answer could not be stored in fence %s", route.name, ticket.fence_id,
                             exc_info=True)
        return answer

    async def _dispatch(self, route: ToolRoute, call: ToolCall, *, fence_id: str | None, takeover: bool) -> Dispatched:
        """Send the call (attempts as the outcome rules allow), then its images and size limit."""
        if route.connector is not None:
            dispatched = await route.connector.dispatch(
                call.arguments, idempotency_key=call.idempotency_key, fence_id=fence_id, takeover=takeover
            )
        elif (upstream := self._upstreams.get(route.upstream or "")) is None:
            return Dispatched(_never_sent(route, f"upstream {route.upstream!r} is not configured"), sent=False)
        else:
            params: dict[str, Any] = {"name": route.target, "arguments": call.arguments, **call.rounds}
            forwarded = forwardable_meta(call.meta)
            if route.scope_forwarded_keys and call.idempotency_key and call.principal != ANONYMOUS:
                forwarded[IDEMPOTENCY_KEY] = scoped_key(call.principal, call.idempotency_key)
            if forwarded:
                params["_meta"] = forwarded
            request = self._upstream_tasks.for_call(upstream, route, call) if self._upstream_tasks else None
            sent = False
            attempt = 1
            while True:
                with self._telemetry.attempt(route, attempt) as seen:
                    seen.event = event = await _attempt(upstream, route.name, params, call.relay, request,
                                                        self._max_result_bytes, call.identity)
                sent = sent or not isinstance(event, NotSent)
                verdict = resolve_attempt(route.name, route.effect, attempt, event, max_attempts=route.max_attempts)
                if not isinstance(verdict, SendAgain):
                    dispatched = Dispatched(verdict, sent)
                    break
                logger.info("tool %s: attempt %d interrupted (%s); sending again", route.name, attempt, verdict.reason)
                await anyio.sleep(resend_delay(upstream.config, attempt))
                attempt += 1
        answer = await self._media.apply(route.name, call.principal, dispatched.answer)
        limited = over_result_limit(route.name, answer, self._max_result_bytes)
        return Dispatched(limited or answer, dispatched.sent)


async def _attempt(
    upstream: Upstream, tool: str, params: dict[str, Any], relay: CallRelay | None, request: Request | None = None,
    max_result_bytes: int = 0, caller: Identity | None = None,
) -> AttemptEvent:
    async def send(method: str, call_params: dict[str, Any]) -> dict[str, Any]:
        if request is not None:  # gateway/tasks/upstream.py: it carries the caller itself
            return await request(method, call_params, relay=relay)
        return await upstream.request(method, call_params, relay=relay, caller=caller)

    async def again(round_params: dict[str, Any]) -> dict[str, Any]:
        return await send("tools/call", round_params)

    try:
        result = await send("tools/call", params)
        result = await answer_rounds(again, params, result, relay)  # a handshake-era client is asked
    except UpstreamNotSent as exc:
        _log_detail(tool, exc)
        return NotSent(exc.reason)
    except UpstreamAnswerTooLarge as exc:
        # The upstream answered, too much to read: failed as the result limit says (gateway/pipeline/limits.py).
        _log_detail(tool, exc)
        return Replied(answer_over_cap(tool, exc.read, max_result_bytes))
    except UpstreamInterrupted as exc:
        _log_detail(tool, exc)
        return Interrupted(exc.reason)
    except UpstreamRpcError as exc:
        if refuses_request(exc, params):
            raise UpstreamRefusedRequest(exc.code, exc.rpc_message, exc.data) from None
        return RpcError(exc.code, exc.rpc_message, exc.data)
    except InputNotProvided as exc:
        return Replied(Answer.error_text(not_provided_text(tool, exc)))
    try:
        return Replied(answer_from_result(result))
    except InvalidResult as exc:
        logger.warning("upstream %s: tools/call %s answered an invalid result: %s", upstream.name, tool, exc)
        return Replied(Answer.error_text(_invalid_result_text(tool, upstream.name, str(exc))))


def refuses_request(exc: UpstreamRpcError, params: Mapping[str, Any]) -> bool:
    """An upstream error about the request itself, passed to the client as that JSON-RPC error: a
    client capability the request needs (-32021), or a bad round of a multi-round-trip call."""
    return exc.code == MISSING_REQUIRED_CLIENT_CAPABILITY or (
        exc.code in (INVALID_PARAMS, INVALID_REQUEST) and any(k in params for k in ROUND_KEYS)
    )


def _log_detail(tool: str, exc: UpstreamError) -> None:
    """What the client's text leaves out (addresses, OS errors), for the operator."""
    logger.warning("tools/call %s: upstream %s: %s%s", tool, exc.upstream, exc.reason, f" ({exc.detail})" if exc.detail else "")


def _invalid_result_text(tool: str, upstream: str, defect: str) -> str:
    return (
        f"The tool {tool} ran, but the upstream server {upstream!r} answered with a result that is not valid MCP "
        f"({defect}), so the gateway cannot pass it on. If the tool writes, check the target system before "
        "calling it again."
    )


def forwardable_meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The client's request _meta minus keys that belong to the client->gateway hop."""
    return {
        k: v for k, v in meta.items() if k not in _HOP_LOCAL_KEYS and not k.startswith(MCP_RESERVED_PREFIX)
    }


def scoped_key(principal: str, key: str) -> str:
    """The key an upstream sees for an authenticated principal: stable, distinct per principal."""
    return f"{hashlib.sha256(principal.encode('utf-8')).hexdigest()[:16]}/{key}"


STORE_BUSY_TEXT = ("The gateway's store was busy; the call was not sent. Nothing was done: send it again with "
                   "the same idempotency key.")


def _never_sent(route: ToolRoute, reason: str) -> Answer:
    return resolve_attempt(route.name, route.effect, 1, NotSent(reason))  # type: ignore[return-value]


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def _missing_key_text(route: ToolRoute) -> str:
    return (
        f"The tool {route.name} was not run: it is {_article(route.effect.value)} {route.effect.value} tool, and the "
        "gateway runs writes only "
        f"with an idempotency key. Send the key in the request's _meta as "
        f'"{IDEMPOTENCY_KEY}": "<a key unique to this call, the same on every retry>", '
        "for example <session>/<turn>/<toolCallId>."
    )
