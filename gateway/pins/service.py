"""`ToolPins`: each upstream tool's definition checked against its pin as listings arrive.

The catalog asks `check(upstream, tools)` whenever an upstream's tool listing changes (and when a
review changed the pins): it answers which of the upstream's tools are held, and records what it
saw. Per upstream, `pinning` (gateway.yaml) decides what a change does:

    off    nothing is recorded or held
    warn   (default) a changed definition is listed, logged, counted
           (`dex_gateway_tool_definition_changes_total`) and awaits review; a new tool is pinned
    hold   a changed definition is withheld from listings and its calls refused until an operator
           accepts it; so is a tool the upstream starts listing after its first listing

The first listing ever recorded of an upstream is trusted as it is (trust on first use): its
tools are pinned. The pins are kept in memory for `check` (a listing is never held up by the
database) and written in the background; `load` reads them before the first listing, and a
replica sees another's reviews by polling the store's stamp (`run_poller`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

import anyio

from .records import Pin, definition_of, digest_of
from .store import PinStore

__all__ = ["HELD_TEXT", "PinMode", "ToolPins", "held_text"]

logger = logging.getLogger(__name__)

PinMode = Literal["off", "warn", "hold"]
HELD_TEXT = ("{what}, and upstream {upstream!r} holds such tools until an operator reviews them: "
             "`dex-gateway tools review`, or the console's pins view (/console)")


def held_text(pin: Pin) -> str:
    what = ("its definition was rejected on review" if pin.state == "rejected" else
            "it is new since this upstream's tools were reviewed" if pin.pinned_digest is None else
            "its definition changed since it was reviewed")
    return HELD_TEXT.format(what=what, upstream=pin.upstream)


class ToolPins:
    def __init__(
        self,
        store: PinStore,
        modes: Mapping[str, PinMode],
        *,
        spawn: Callable[[Callable[[], Awaitable[None]]], object],
        on_change: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self._modes = dict(modes)
        self._spawn = spawn
        self._on_change = on_change  # a definition changed (the metric), with its upstream
        self._clock = clock
        self._pins: dict[tuple[str, str], Pin] = {}
        self._stamp = 0.0
        # Bumped whenever what `check` answers may differ (a review): the catalog rebuilds.
        self.version = 0
        self.on_reviewed: Callable[[], None] | None = None

    def mode(self, upstream: str) -> PinMode:
        return self._modes.get(upstream, "warn")

    async def load(self) -> None:
        self._pins = {(p.upstream, p.tool): p for p in await self.store.all()}
        self._stamp = await self.store.stamp()

    def pins(self) -> list[Pin]:
        return sorted(self._pins.values(), key=lambda p: (p.upstream, p.tool))

    # -- the catalog's question --------------------------------------------------------------

    def check(self, upstream: str, tools: list[dict[str, Any]]) -> dict[str, str]:
        """The upstream's tools to withhold (its own names), each with the text its calls get."""
        mode = self.mode(upstream)
        if mode == "off":
            return {}
        now = self._clock()
        first_listing = not any(u == upstream for u, _ in self._pins)
        seen: list[Pin] = []
        held: dict[str, str] = {}
        for tool in tools:
            name = tool.get("name")
            if not isinstance(name, str):
                continue
            definition = definition_of(tool)
            digest = digest_of(definition)
            pin = self._pins.get((upstream, name))
            if pin is None:
                if first_listing or mode == "warn":
                    pin = Pin(upstream, name, "pinned", digest, definition, digest, definition, now)
                else:
                    pin = Pin(upstream, name, "new", None, None, digest, definition, now, changed_at=now)
                    logger.warning("upstream %s: new tool %r held for review (pinning: hold)", upstream, name)
                seen.append(pin)
            elif pin.pinned_digest == digest:
                if pin.state != "pinned" or pin.seen_digest != digest:  # the upstream went back to the pinned one
                    pin = Pin(upstream, name, "pinned", digest, definition, digest, definition, pin.first_seen_at,
                              reviewed_by=pin.reviewed_by, reviewed_at=pin.reviewed_at)
                    seen.append(pin)
            elif pin.seen_digest != digest:
                pin = Pin(upstream, name, "changed" if pin.pinned_digest is not None else "new", pin.pinned_digest,
                          pin.pinned_definition, digest, definition, pin.first_seen_at, changed_at=now)
                seen.append(pin)
                logger.warning("upstream %s: the definition of tool %r changed since it was pinned (%s); %s",
                               upstream, name, f"{pin.pinned_digest}"[:12] + " -> " + digest[:12],
                               "withheld until reviewed" if mode == "hold" else "listed (pinning: warn), awaiting review")
                if self._on_change is not None:
                    self._on_change(upstream)
            if mode == "hold" and pin.state != "pinned":
                held[name] = held_text(pin)
        if seen:
            self._pins.update({(p.upstream, p.tool): p for p in seen})
            self._spawn(lambda: self._save(seen, now))
        return held

    async def _save(self, pins: list[Pin], at: float) -> None:
        try:
            self._wrote(*await self.store.put(pins, at))
        except Exception:  # noqa: BLE001 - kept in memory; recorded again when the listing is seen next
            logger.warning("tool pins: recording %d definition(s) failed", len(pins), exc_info=True)

    def _wrote(self, before: float, after: float) -> None:
        """Our own write moved the stamp from `before` to `after`: when nothing else had changed the
        pins since we last read them, what we hold is what the store holds, so the poller need not
        read every pin again and the catalog need not rebuild (a first listing of 10,000 tools
        otherwise made both happen once, measured by bench/scale_bench.py)."""
        if before == self._stamp:
            self._stamp = after

    # -- reviews ------------------------------------------------------------------------------

    async def review(self, upstream: str, tool: str, accept: bool, *, by: str) -> Pin | None:
        """Accept (pin what the upstream lists now) or reject a definition; None: no such pin."""
        await self.refresh()
        pin = self._pins.get((upstream, tool))
        if pin is None:
            return None
        now = self._clock()
        reviewed = pin.accepted(by, now) if accept else pin.rejected(by, now)
        await self.store.put([reviewed], now)
        logger.info("upstream %s: tool %r %s by %s", upstream, tool, "accepted" if accept else "rejected", by)
        await self.refresh(force=True)
        return self._pins.get((upstream, tool), reviewed)

    async def refresh(self, *, force: bool = False) -> bool:
        """Read the pins again when the store's stamp moved (a review here or on another replica)."""
        stamp = await self.store.stamp()
        if stamp == self._stamp and not force:
            return False
        await self.load()
        self.version += 1
        if self.on_reviewed is not None:
            self.on_reviewed()
        return True

    async def run_poller(self, interval: float) -> None:
        """Every `interval` seconds, pick up reviews made elsewhere (another replica, the CLI)."""
        while True:
            await anyio.sleep(interval)
            try:
                await self.refresh()
            except Exception:  # noqa: BLE001 - a busy database: the next round tries again
                logger.debug("tool pins: polling the store failed", exc_info=True)
