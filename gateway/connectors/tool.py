"""One exposed connector operation: check the arguments, run the attempts, map the branch."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

import anyio

from ..protocol import Arguments, ContentBlock, JsonObject, JsonSchema
from ..conventions.answers import Answer, Dispatched
from ..conventions.keys import GATEWAY_PREFIX, Effect
from ..conventions.outcomes import Interrupted, NotSent, rejected, unknown
from ..telemetry.tracing import attempt_result, client_span
from .bindings import Binding, ConnectorRequest, ConnectorResponse
from .branches import Decision, Row, Verdict, decide
from .call_id import derive_call_id
from .input_schema import ArgumentChecker
from .manifest import Manifest, Operation
from .results import MAX_RESULT_BYTES, TRUNCATED_BYTES_KEY, compact_json, cut

CALL_META_KEY = GATEWAY_PREFIX + "connectorCall"

_UNKNOWN_WHY = {
    Row.UNCERTAIN: "the connector could not confirm the outcome",
    Row.MUTATION_DEFECT: "a mutation's defect can follow an attempt that already reached the provider",
    Row.MAYBE_SENT: "an earlier attempt of this call may have been applied",
    Row.LISTED_UNKNOWN_OR_MUTATION_UNLISTED: "the branch does not prove the mutation was not applied",
}


@dataclass(frozen=True)
class ConnectorTool:
    """A reviewed operation exposed as the gateway tool `name`.

    The gateway's fence sits in front of `call`; this class does not fence. It validates
    the arguments, runs the binding's attempts (retry per the manifest, reads and safe
    mutations only), and turns the branch into an Answer by SPEC 7's table.
    """

    name: str
    description: str
    input_schema: JsonSchema
    effect: Effect
    requires_approval: bool
    connector_id: str
    operation: str
    spec: Operation = field(repr=False, compare=False)
    binding: Binding = field(repr=False, compare=False)
    checker: ArgumentChecker = field(repr=False, compare=False)
    max_result_bytes: int = MAX_RESULT_BYTES

    @classmethod
    def build(cls, manifest: Manifest, operation: Operation, binding: Binding, *, max_result_bytes: int = MAX_RESULT_BYTES) -> "ConnectorTool":
        if operation.input_schema is None:
            raise ValueError(f"{manifest.connector_id} {operation.name}: no inputSchema")
        return cls(
            name=manifest.tool_name(operation),
            description=operation.description,
            input_schema=operation.input_schema,
            effect=operation.effect,
            requires_approval=operation.requires_approval,
            connector_id=manifest.connector_id,
            operation=operation.name,
            spec=operation,
            binding=binding,
            checker=ArgumentChecker(operation.input_schema),
            max_result_bytes=max_result_bytes,
        )

    @property
    def label(self) -> str:
        return f"{self.connector_id} {self.operation}"

    def call_id(self, *, idempotency_key: str | None, fence_id: str | None) -> str:
        """The Call ID; a call with neither a fence nor a key (a plain read) gets a fresh one."""
        key = fence_id if fence_id is not None else idempotency_key
        if key is None:
            return str(uuid.uuid4())
        return str(derive_call_id(key, self.connector_id, self.operation))

    async def call(
        self,
        arguments: Arguments,
        *,
        idempotency_key: str | None,
        fence_id: str | None,
        takeover: bool,
    ) -> Answer:
        dispatched = await self.dispatch(arguments, idempotency_key=idempotency_key, fence_id=fence_id, takeover=takeover)
        return dispatched.answer

    async def dispatch(
        self,
        arguments: Arguments,
        *,
        idempotency_key: str | None,
        fence_id: str | None,
        takeover: bool,
    ) -> Dispatched:
        """Run the operation; `sent` is False only when no attempt can have reached the service."""
        problems = self.checker.violations(arguments)
        if problems:
            return Dispatched(self._finish(rejected(
                f"{self.label}: the arguments do not match the tool's inputSchema, so the operation did not run: "
                + "; ".join(problems)
            )), sent=False)
        call_id = self.call_id(idempotency_key=idempotency_key, fence_id=fence_id)
        mutation = self.spec.is_mutation
        if takeover and mutation and not self.effect.resendable:
            # A non-idempotent write is never sent twice, whatever asked for it.
            answer = self._finish(unknown(f"{self.label}: an earlier attempt of this call may have been sent."), call_id, 0)
            return Dispatched(answer, sent=True)
        # For a mutation, did some attempt (or a call this one takes over) maybe reach the service?
        maybe_sent = takeover
        interruption: str | None = None
        not_sent: str | None = None
        retry = self.spec.execution.retry
        started = time.monotonic()
        attempts = self.spec.max_attempts
        attempt = 0
        for attempt in range(1, attempts + 1):
            if attempt > 1:
                delay = retry.delay_before(attempt)
                if retry.total_duration is not None and time.monotonic() - started + delay > retry.total_duration:
                    attempt -= 1
                    break
                await anyio.sleep(delay)
            request = ConnectorRequest(
                connector=self.connector_id, operation=self.operation, input=arguments,
                call_id=call_id, idempotency_key=idempotency_key, attempt=attempt,
            )
            with client_span(f"connector {self.connector_id} {self.operation}", {
                "dex.connector": self.connector_id, "dex.operation": self.operation, "dex.attempt": attempt,
                "gen_ai.tool.name": self.name,
            }) as span:
                result = await self.binding.attempt(request, self.spec.execution.timeout)
                if span is not None:
                    span.set_attribute("dex.attempt.result", attempt_result(result))
            if isinstance(result, ConnectorResponse):
                return Dispatched(self._answer(result, maybe_sent, call_id, attempt), sent=True)
            if isinstance(result, Interrupted):
                maybe_sent = True
                interruption = result.reason
            elif isinstance(result, NotSent):
                not_sent = result.reason
        if mutation and maybe_sent:
            reason = interruption or "an earlier attempt may have been sent"
            answer = self._finish(unknown(f"{self.label} was interrupted after it was sent: {reason}."), call_id, attempt)
            return Dispatched(answer, sent=True)
        if interruption is not None:
            every = "its only attempt" if attempt == 1 else f"all {attempt} attempts"
            answer = self._finish(Answer.error_text(f"{self.label} was interrupted on {every}: {interruption}."), call_id, attempt)
            return Dispatched(answer, sent=True)
        answer = self._finish(Answer.error_text(
            f"{self.label} did not run: {not_sent}. Nothing was sent, so it is safe to call it again."
        ), call_id, attempt)
        return Dispatched(answer, sent=False)

    def _answer(self, response: ConnectorResponse, maybe_sent: bool, call_id: str, attempt: int) -> Answer:
        decision: Decision = decide(
            kind=self.spec.kind,
            branch=response.branch,
            success_branches=self.spec.success_branches,
            listing=self.spec.listing,
            maybe_sent_before=maybe_sent,
        )
        meta_extra = {"branch": response.branch, "row": decision.row.value}
        if decision.verdict is Verdict.SUCCESS:
            text, full = cut(compact_json(response.value), self.max_result_bytes)
            answer = Answer(content=[{"type": "text", "text": text}])
            if full is not None:
                answer = answer.with_meta(**{TRUNCATED_BYTES_KEY: full})
            return self._finish(answer, call_id, attempt, meta_extra, already_cut=True)
        text = self.branch_text(response)
        if decision.verdict is Verdict.REJECTED:
            answer = rejected(text)
        elif decision.verdict is Verdict.FAILED:
            answer = Answer.error_text(text)
        else:
            answer = unknown(f"{text}. The outcome is unknown: {_UNKNOWN_WHY[decision.row]}.")
        return self._finish(answer, call_id, attempt, meta_extra)

    def branch_text(self, response: ConnectorResponse) -> str:
        """`<connector> <operation> returned <branch>: <kind>: <message>`."""
        if response.error is not None:
            kind, message = response.error.kind, response.error.message
        else:
            kind, message = "unspecified", compact_json(response.value) if response.value is not None else ""
        return f"{self.label} returned {response.branch}: {kind}: {message}"

    def _finish(
        self,
        answer: Answer,
        call_id: str | None = None,
        attempts: int | None = None,
        extra: JsonObject | None = None,
        *,
        already_cut: bool = False,
    ) -> Answer:
        """Cut over-long text (any answer: an error message can be large too) and record the
        Call ID and attempts under the gateway's own prefix."""
        if not already_cut:
            content: list[ContentBlock] = []
            full_sizes: list[int] = []
            for block in answer.content:
                if block.get("type") == "text":
                    text, full = cut(block.get("text", ""), self.max_result_bytes)
                    block = {**block, "text": text}
                    if full is not None:
                        full_sizes.append(full)
                content.append(block)
            answer = Answer(content, answer.structured_content, answer.is_error, answer.meta)
            if full_sizes:
                answer = answer.with_meta(**{TRUNCATED_BYTES_KEY: max(full_sizes)})
        if call_id is None:
            return answer
        record: JsonObject = {"callId": call_id, "attempts": attempts, **(extra or {})}
        return answer.with_meta(**{CALL_META_KEY: record})
