"""The re-issue rules of a gateway tool call, in one place (SPEC section 10).

An attempt is counted in the session store (`attempts`, committed) right before its request
leaves, once the gateway has proved reachable; so the count is the number of requests that may
have reached the gateway, and it carries over a restart of the host.

* `read` / `idempotent_write`: at most `attempts_for(effect)` (3) attempts **in all**, across
  restarts, each with the same idempotency key.
* Every other effect: one attempt. An attempt that was sent and got no answer is *interrupted*:
  its outcome is unknown, and the running host never sends it again.
* A host restart (SIGKILL, power loss) finds a single-attempt call `sent` with no answer. SPEC
  section 10 says the restarted host re-sends the unfinished call with the same key, so the
  gateway's fence replays the first answer or answers unknown. That re-send is a *recovery*:
  at most one (`RECOVERY_RESENDS`), only for a call sent by an earlier run of the host, and only
  while the gateway surely still keeps the fence (`RECOVERY_WINDOW_SECONDS`, well inside its
  24 h retention: after retention a same-key call would be a new call). It cannot make the
  upstream run the write twice: the fence answers a key it knows (`done` → the first answer,
  `pending` → waits for it, a dead owner → `unknown`), and a key it does not know never reached
  it. Past the bound, the call is outcome unknown without any request.

What one attempt's event means (the answer, send again, or give up) is
`gateway.conventions.outcomes.resolve_attempt`, the rule the gateway itself follows upstream.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.conventions.answers import Answer
from gateway.conventions.keys import Effect
from gateway.conventions.outcomes import AttemptEvent, Interrupted, SendAgain, attempts_for, resolve_attempt

from ..domain.texts import HOST_STOPPED

RECOVERY_RESENDS = 1
RECOVERY_WINDOW_SECONDS = 3600.0


@dataclass(frozen=True)
class PriorAttempts:
    """What the session store says about earlier attempts of one call."""

    count: int = 0
    last_sent_at: float | None = None
    # Sent by an earlier run of the host (it was killed or stopped while the call was out).
    before_restart: bool = False


@dataclass(frozen=True)
class AttemptPlan:
    """Attempts `first`..`last` (numbered from 1, across restarts) may be sent now."""

    first: int
    last: int
    recovery: bool = False

    @property
    def sends(self) -> bool:
        return self.first <= self.last


def plan_attempts(effect: Effect, prior: PriorAttempts, now: float) -> AttemptPlan:
    budget = attempts_for(effect)
    if effect.resendable or prior.count == 0:
        return AttemptPlan(first=prior.count + 1, last=budget)
    recent = prior.last_sent_at is not None and now - prior.last_sent_at <= RECOVERY_WINDOW_SECONDS
    if prior.before_restart and recent and prior.count < budget + RECOVERY_RESENDS:
        return AttemptPlan(first=prior.count + 1, last=prior.count + 1, recovery=True)
    return AttemptPlan(first=prior.count + 1, last=prior.count)


def resolve(tool: str, effect: Effect, attempt: int, plan: AttemptPlan, event: AttemptEvent) -> Answer | SendAgain:
    """The conventions' reading of one attempt's event, with this plan's last attempt as the limit."""
    return resolve_attempt(tool, effect, attempt, event, max_attempts=plan.last)


def give_up(tool: str, effect: Effect, prior: PriorAttempts) -> Answer:
    """The final answer of a call with no attempt left: its last one was interrupted."""
    answer = resolve_attempt(tool, effect, prior.count, Interrupted(HOST_STOPPED), max_attempts=prior.count)
    assert isinstance(answer, Answer)  # attempt == max_attempts: never sent again
    return answer
