"""CPU the telemetry hooks add to one fenced tools/call, measured in isolation (no network).

    .venv/bin/python bench/telemetry_cost.py [--calls 20000]

Runs, for each setting, the exact sequence of hooks one fenced write goes through in the gateway
-- the front span (`FastPath._traced`), the call scope (`CallTelemetry.call`: span, in-flight
gauge, count, latency histogram), the fence decision (`fenced`), one upstream attempt
(`attempt`, its CLIENT span and count) and the upstream request's `_meta` injection
(`upstream_request_span`) -- around an empty body, and reports microseconds of CPU per call:

  no hooks       the same sequence without any hook (the loop itself)
  off            traces off, metrics off  (what the hooks cost when both are off)
  metrics        traces off, metrics on   (the default)
  traces         traces on (a BatchSpanProcessor exporting to a no-op exporter), metrics on

The gateway spends ~0.6-1.3 ms of CPU per call (docs/benchmarks.md), so 10 us is ~1 %.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult  # noqa: E402

from gateway.pipeline.catalog import ToolRoute  # noqa: E402
from gateway.conventions.effects import Classification  # noqa: E402
from gateway.conventions.answers import Answer  # noqa: E402
from gateway.conventions.keys import Effect  # noqa: E402
from gateway.conventions.outcomes import Replied  # noqa: E402
from gateway.fences import Owner, Proceed, Ticket  # noqa: E402
from gateway.telemetry import Telemetry  # noqa: E402
from gateway.telemetry.metrics import GatewayMetrics  # noqa: E402
from gateway.telemetry.tracing import NO_FRONT_SPAN, front_span, upstream_request_span  # noqa: E402


class _Discard(SpanExporter):
    def export(self, spans: Any) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def _route() -> ToolRoute:
    return ToolRoute(name="pay__send", definition={"name": "send"}, classification=Classification(Effect.NON_IDEMPOTENT_WRITE, False, True),
                     upstream="pay", target="send")


async def _bare(route: ToolRoute, answer: Answer) -> None:
    """The same sequence without any hook: the loop's own cost, subtracted from the others."""

    async def send() -> Replied:
        return Replied(answer)

    await send()


async def _one(telemetry: Telemetry, route: ToolRoute, decision: Proceed, answer: Answer) -> None:
    calls = telemetry.calls
    front = front_span(telemetry.tracer, "tools/call", target=route.name, request_id=1, protocol_version="2025-11-25",
                       meta={}, headers=None) if telemetry.tracer is not None else None
    if front is not None:
        front.__enter__()
    try:
        span = NO_FRONT_SPAN
        with calls.call(route) as seen:
            calls.fenced(route, decision)

            async def send() -> Replied:
                with upstream_request_span("pay", "tools/call", {"name": "send", "arguments": {}}):
                    return Replied(answer)

            await calls.attempt(route, 1, send())
            seen.answer = answer
        span.result({"isError": False})
    finally:
        if front is not None:
            front.__exit__(None, None, None)


async def _measure(telemetry: Telemetry | None, calls: int) -> float:
    route = _route()
    decision = Proceed(Ticket("f", "p", route.name, route.effect, Owner("r", "b"), 1, takeover=False))
    answer = Answer(content=[{"type": "text", "text": "ok"}])

    async def one() -> None:
        if telemetry is None:
            await _bare(route, answer)
        else:
            await _one(telemetry, route, decision, answer)

    for _ in range(500):
        await one()
    started = time.process_time()
    for _ in range(calls):
        await one()
    return (time.process_time() - started) / calls * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(_Discard(), max_queue_size=65536))
    settings: dict[str, Telemetry | None] = {
        "no hooks": None,
        "off": Telemetry(),
        "metrics": Telemetry(metrics=GatewayMetrics()),
        "traces": Telemetry(tracer=provider.get_tracer("dex-gateway"), metrics=GatewayMetrics()),
    }
    results: dict[str, list[float]] = {name: [] for name in settings}
    for _ in range(args.rounds):  # interleaved, so a drift of the machine spreads over all
        for name, telemetry in settings.items():
            results[name].append(asyncio.run(_measure(telemetry, args.calls)))
    provider.shutdown()
    print(f"CPU per fenced tools/call in the telemetry hooks, {args.calls} calls x {args.rounds} rounds;"
          " min and median us per call, and added over `no hooks`:")
    floor = min(results["no hooks"])
    for name, values in results.items():
        values.sort()
        print(f"  {name:<9} {values[0]:7.1f} / {values[len(values) // 2]:7.1f} us   +{values[0] - floor:6.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
