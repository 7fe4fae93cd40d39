"""Fuzz of the front's request parsing (issue 14): hostile HTTP requests to a real gateway.

One `dex-gateway serve` process (target.py: bearer tokens, the payments example upstream, a
64 KiB body limit) gets requests from five hypothesis strategy families (strategies.py: random
bytes, arbitrary JSON values, mutated handshake-era and 2026-07-28 messages, hostile headers and
HTTP methods) over real HTTP, one at a time. Every answer is judged by oracle.py: never a 5xx,
never a hang, 202 only for a well-formed notification or response, otherwise a JSON-RPC body
(JSON or SSE), a 4xx always with a JSON-RPC error, no traceback in a body or in the gateway's log.
Product bugs found so far are in findings.py: their reproducers are strict xfails here, and the
fuzz counts a case they fully explain as "known" instead of failing on it again.

Two sizes:

* `make test`: `SHORT_EXAMPLES` cases per family, derandomized (the same cases on every run, so
  the suite does not flip; a new finding shows up in `make fuzz`);
* `make fuzz` (marker `fuzz`, excluded by default): `FUZZ_EXAMPLES` cases per family (default
  1200, so 6000 in all), randomized (`--hypothesis-seed=N` repeats a run).

The figures (requests per family, failing, statuses, time) are printed at the end of the run.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, reject, settings

from tests.fuzz.findings import FIXED, KNOWN, LOG_PROBLEM, Finding, RawRequest, known_findings, unexplained_log_tracebacks
from tests.fuzz.oracle import FIGURES, Unsendable, log_tracebacks, problems, send, send_raw
from tests.fuzz.strategies import FAMILIES, Case, cases
from tests.fuzz.target import CREDENTIALS, Fuzzed
from tests.support.servers import read_executions

SHORT_EXAMPLES = int(os.environ.get("FUZZ_SHORT_EXAMPLES", "100"))
FUZZ_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "1200"))

_COMMON = dict(
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example,
                           HealthCheck.filter_too_much],
)
SHORT = settings(max_examples=SHORT_EXAMPLES, derandomize=True, **_COMMON)
LONG = settings(max_examples=FUZZ_EXAMPLES, **_COMMON)


def check(fuzzed: Fuzzed, case: Case) -> None:
    mark = fuzzed.gateway.log_mark()
    try:
        answer = send(fuzzed.client, fuzzed.url, case)
    except Unsendable:
        FIGURES.record(case, None, [])
        reject()
    found = problems(case, answer)
    # Tracebacks logged while this request ran (a notification's handler may log just after its
    # 202, so a line can land during the next case: known_findings judges by text, not by case).
    logged = log_tracebacks(fuzzed.gateway.stderr_lines, mark)
    if logged:
        found.append(LOG_PROBLEM + " || ".join(logged))
    if fuzzed.gateway.process is not None and fuzzed.gateway.process.poll() is not None:
        found.append(f"the gateway exited ({fuzzed.gateway.process.returncode})")
    known = known_findings(case, answer, found) if found else None
    FIGURES.record(case, answer, found, known=[f.id for f in known] if known else None)
    if known:
        return
    assert not found, f"{case!r}\n-> {answer!r}\nproblems: {found}"


def _fuzz_test(family: str, size: settings, long: bool):
    @size
    @given(case=cases(family, CREDENTIALS))
    def test(fuzzed: Fuzzed, case: Case) -> None:
        check(fuzzed, case)

    test.__name__ = f"test_{family}{'_long' if long else ''}"
    test.__doc__ = f"The {family} family, {'long run (make fuzz)' if long else 'short run'}."
    marks = [pytest.mark.timeout(max(600, 2 * FUZZ_EXAMPLES)), pytest.mark.fuzz] if long else [pytest.mark.timeout(120)]
    for mark in marks:
        test = mark(test)
    return test


for _family in FAMILIES:
    globals()[f"test_{_family}"] = _fuzz_test(_family, SHORT, long=False)
    globals()[f"test_{_family}_long"] = _fuzz_test(_family, LONG, long=True)


def _xfail(finding: Finding) -> pytest.MarkDecorator:
    return pytest.mark.xfail(strict=True, raises=AssertionError, reason=finding.summary)


@pytest.mark.parametrize("finding, reproducer", [
    *(pytest.param(f, r, id=f"{f.id}-{i}", marks=_xfail(f)) for f in KNOWN for i, r in enumerate(f.reproducers)),
    *(pytest.param(f, r, id=f"fixed-{f.id}-{i}") for f in FIXED for i, r in enumerate(f.reproducers)),
])
def test_finding(fuzzed: Fuzzed, finding: Finding, reproducer: Any) -> None:
    """Each finding's reproducers: an open one fails until the product is fixed (then it moves to
    FIXED); a fixed one must stay fixed."""
    request = reproducer(CREDENTIALS)
    mark = fuzzed.gateway.log_mark()
    if isinstance(request, RawRequest):
        case = request.case
        answer = send_raw("127.0.0.1", fuzzed.gateway.port, request.data)
    else:
        case = request
        answer = send(fuzzed.client, fuzzed.url, case)
    found = problems(case, answer)
    deadline = time.monotonic() + finding.settle  # wait for a late log line, not longer than needed
    while not (logged := log_tracebacks(fuzzed.gateway.stderr_lines, mark)) and time.monotonic() < deadline:
        time.sleep(0.05)
    if logged:
        found.append(LOG_PROBLEM + " || ".join(logged))
    assert not found, f"{request!r}\n-> {answer!r}\nproblems: {found}"


def test_a_tools_call_sent_as_a_notification_never_runs(fuzzed: Fuzzed) -> None:
    """A tools/call without an id is not a request the client can get an answer to: nothing may run."""
    to = f"notification-{uuid.uuid4().hex[:8]}"
    body = json.dumps({"jsonrpc": "2.0", "method": "tools/call", "params": {
        "name": "pay__send_payment", "arguments": {"to": to, "amount": 1},
        "_meta": {"io.superdurable.dex/idempotencyKey": f"fuzz/{to}/1"}}}).encode()
    case = Case("known", "POST", [(b"content-type", b"application/json"), (b"accept", b"application/json, text/event-stream"),
                                  (b"authorization", f"Bearer {CREDENTIALS.full}".encode())], body)
    answer = send(fuzzed.client, fuzzed.url, case)
    assert answer.status < 500, answer
    assert answer.status == 400 and b"needs an" in answer.body, answer  # refused, not a silent 202
    deadline = time.monotonic() + 5.0  # stop at once when it ran; otherwise wait the 5 s out
    while not (ran := [r for r in read_executions(fuzzed.state, tool="send_payment") if r["arguments"].get("to") == to]):
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not ran, f"{case!r}\n-> {answer!r}\nthe upstream ran it: {ran}"


def test_gateway_survived(fuzzed: Fuzzed) -> None:
    """After the fuzz: the process is alive, healthy, still answers a plain call, and its log has
    no traceback (but those of known findings)."""
    logged = log_tracebacks(fuzzed.gateway.stderr_lines)
    unexplained = unexplained_log_tracebacks(logged)
    upstream = fuzzed.upstream_log.read_text(errors="replace").splitlines() if fuzzed.upstream_log.exists() else []
    FIGURES.notes.append(f"the gateway's stderr: {len(logged)} tracebacks, {len(logged) - len(unexplained)} of them "
                         f"of known findings; the example upstream's own stderr: {len(log_tracebacks(upstream))} "
                         f"tracebacks (fuzzed arguments its handlers do not check)")
    process = fuzzed.gateway.process
    alive = process is not None and process.poll() is None
    assert alive, "the gateway exited:\n" + fuzzed.gateway.log[-4000:]
    assert httpx.get(fuzzed.gateway.base + "/healthz", timeout=5).status_code == 200
    # An account no fuzzed payment names: the fuzz's writes (amounts that are not numbers) may
    # have broken the example server's balance of other accounts, which is not the gateway's doing.
    account = f"survivor-{uuid.uuid4().hex[:8]}"
    response = httpx.post(
        fuzzed.url,
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/call",
              "params": {"name": "pay__get_balance", "arguments": {"account": account}}},
        headers={"accept": "application/json, text/event-stream", "authorization": f"Bearer {CREDENTIALS.full}"},
        timeout=10,
    )
    assert response.status_code == 200, response.text
    assert f"balance of {account}: 1000.00 EUR" in response.text, response.text
    assert not unexplained, "tracebacks in the gateway's log:\n" + "\n".join(unexplained)
