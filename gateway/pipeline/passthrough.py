"""Requests other than tools: passed to the upstream that serves them, answered as it answered.

Resources (read, subscribe, unsubscribe), prompts (get), completion and the log level go to
the upstream the catalog names for the resource URI or prompt; the answer comes back minus the
keys of the upstream hop. A gateway media uri (`dex-gateway://media/sha256/<hash>`) is read
from the media store instead, for a principal the image reached (gateway/media/serving.py).
A client's mistake (an unknown prompt, a URI no upstream serves) is
a RequestError; an upstream that fails is answered without its address or the exception
(those go to the log).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import anyio
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, MISSING_REQUIRED_CLIENT_CAPABILITY

from ..auth.principals import Identity
from .calls import forwardable_meta
from .catalog import Catalog, PromptRoute
from ..errors import (
    InputNotProvided, RequestError, UpstreamAnswerTooLarge, UpstreamError, UpstreamNotSent, UpstreamRpcError,
)
from ..media.serving import MediaReader
from ..upstreams.relay import CAPABILITY_OF, CallRelay
from ..auth.scope import PrincipalScope
from .rounds import answer_rounds, asked_methods, is_input_required
from ..upstreams.results import without_hop_keys
from ..upstreams.rpc import MODERN_VERSION
from ..upstreams.upstream import Upstream

__all__ = ["Passthrough"]

logger = logging.getLogger(__name__)


class Passthrough:
    """Every method checks the principal's scope first: what it may not reach is answered as
    if it did not exist (an unknown prompt, a URI no upstream serves)."""

    def __init__(
        self, catalog: Catalog, upstreams: Mapping[str, Upstream], scope: PrincipalScope, media: MediaReader | None = None
    ) -> None:
        self._catalog = catalog
        self._upstreams = upstreams
        self._scope = scope
        self._media = media or MediaReader(None, None)

    async def resources(self, principal: str) -> list[dict[str, Any]]:
        routes = await self._catalog.resources()
        return [r.definition for r in routes if self._scope.may_use_resource(principal, str(r.definition.get("uri")), r.upstream)]

    async def resource_templates(self, principal: str) -> list[dict[str, Any]]:
        routes = await self._catalog.resource_templates()
        return [
            r.definition
            for r in routes
            if self._scope.may_use_resource(principal, str(r.definition.get("uriTemplate")), r.upstream)
        ]

    async def prompts(self, principal: str) -> list[dict[str, Any]]:
        routes = await self._catalog.prompts()
        return [r.definition for r in routes if self._scope.may_use_prompt(principal, r.name, r.upstream)]

    async def read_resource(
        self, principal: str, uri: str, meta: Mapping[str, Any], relay: CallRelay, rounds: Mapping[str, Any] | None = None,
        *, caller: Identity | None = None,
    ) -> dict[str, Any]:
        """The upstream's answer; on 2026-07-28 possibly a round of questions (`input_required`).
        `caller`: who asks (an upstream with auth.mode token_exchange gets the caller's token)."""
        if self._media.serves(uri):
            return await self._media.read_resource(principal, uri)
        params = {"uri": uri, **(rounds or {})}
        return await self._forward(await self._serving(principal, uri), "resources/read", params, meta, relay, caller)

    async def check_resource(self, principal: str, uri: str) -> str:
        """The upstream serving `uri` for this principal; RequestError (not found, with the URI) otherwise."""
        return await self._serving(principal, uri)

    async def get_prompt(
        self, principal: str, name: str, arguments: Mapping[str, str] | None, meta: Mapping[str, Any], relay: CallRelay,
        rounds: Mapping[str, Any] | None = None, *, caller: Identity | None = None,
    ) -> dict[str, Any]:
        """The upstream's answer; on 2026-07-28 possibly a round of questions (`input_required`)."""
        route = await self._prompt(principal, name)
        params: dict[str, Any] = {"name": route.target, **(rounds or {})}
        if arguments:
            params["arguments"] = dict(arguments)
        return await self._forward(route.upstream, "prompts/get", params, meta, relay, caller)

    async def complete(
        self, principal: str, request: dict[str, Any], meta: Mapping[str, Any], relay: CallRelay,
        *, caller: Identity | None = None,
    ) -> dict[str, Any]:
        """`completion/complete` (`request`: its params minus `_meta`); the ref names prompt or resource."""
        ref = dict(request.get("ref") or {})
        if ref.get("type") == "ref/prompt":
            route = await self._prompt(principal, str(ref.get("name")))
            upstream, ref = route.upstream, {**ref, "name": route.target}
        else:
            upstream = await self._serving(principal, str(ref.get("uri")))
        return await self._forward(upstream, "completion/complete", {**request, "ref": ref}, meta, relay, caller)

    async def set_log_level(self, principal: str, level: str) -> None:
        """Pass the level on to every handshake-era upstream in the principal's scope that logs (others are skipped)."""
        names = self._scope.upstreams_for(principal, self._upstreams)
        if not names:
            raise RequestError(INVALID_PARAMS, "logging/setLevel: this principal's scope includes no upstream")

        async def set_level(upstream: Upstream) -> None:
            if upstream.protocol_version == MODERN_VERSION:
                return  # asked per request instead (the session's level, gateway/front/relays.py)
            try:
                await upstream.request("logging/setLevel", {"level": level})
            except UpstreamError as exc:
                logger.debug("upstream %s: logging/setLevel not applied: %s", upstream.name, exc)

        async with anyio.create_task_group() as tg:
            for name in names:
                tg.start_soon(set_level, self._upstreams[name])

    async def _prompt(self, principal: str, name: str) -> PromptRoute:
        route = await self._catalog.prompt(name)
        if route is None or not self._scope.may_use_prompt(principal, route.name, route.upstream):
            raise RequestError(INVALID_PARAMS, f"unknown prompt {name!r}")
        return route

    async def _serving(self, principal: str, uri: str) -> str:
        upstream = await self._catalog.resource_upstream(uri)
        if upstream is None or not self._scope.may_use_resource(principal, uri, upstream):
            # SEP-2164: -32602 with the URI in `data`.
            raise RequestError(INVALID_PARAMS, f"Resource not found: no upstream serves {uri!r}", {"uri": uri})
        return upstream

    async def _forward(
        self, upstream_name: str, method: str, params: dict[str, Any], meta: Mapping[str, Any], relay: CallRelay,
        caller: Identity | None = None,
    ) -> dict[str, Any]:
        """The upstream's result minus its hop's keys; an `input_required` round only for a 2026 client."""
        upstream = self._upstreams[upstream_name]
        forwarded = forwardable_meta(meta)
        if forwarded:
            params["_meta"] = forwarded

        async def again(round_params: dict[str, Any]) -> dict[str, Any]:
            return await upstream.request(method, round_params, relay=relay, caller=caller)

        try:
            result = await upstream.request(method, params, relay=relay, caller=caller)
            result = await answer_rounds(again, params, result, relay)  # a handshake-era client is asked
        except UpstreamRpcError as exc:
            raise RequestError(exc.code, exc.rpc_message, exc.data) from None
        except UpstreamAnswerTooLarge as exc:
            raise RequestError(INTERNAL_ERROR, f"{method} failed: the answer of the upstream {upstream_name!r} is over "
                               f"{exc.cap} bytes, this gateway's cap for an upstream answer (from server.max_result_bytes), "
                               "so it was not read") from None
        except UpstreamNotSent as exc:  # its reason is safe to show (no address): e.g. no token for this caller
            logger.warning("%s failed: %s", method, exc)
            raise RequestError(INTERNAL_ERROR, f"{method} failed: nothing was sent to the upstream {upstream_name!r}: "
                                               f"{exc.reason}") from None
        except UpstreamError as exc:
            logger.warning("%s failed: %s", method, exc)
            raise RequestError(INTERNAL_ERROR, f"{method} failed: the upstream {upstream_name!r} did not answer") from None
        except InputNotProvided as exc:
            raise _missing_capability(method, exc) from None
        if is_input_required(result) and not relay.modern:
            raise _missing_capability(method, InputNotProvided(asked_methods(result), "no session can carry them"))
        if "_meta" in result:
            result["_meta"] = without_hop_keys(result["_meta"]) or {}
        return result


def _missing_capability(method: str, exc: InputNotProvided) -> RequestError:
    """A handshake-era client that cannot answer the upstream's questions (-32021, as the upstream would)."""
    needed: dict[str, dict[str, Any]] = {CAPABILITY_OF[m]: {} for m in exc.methods if m in CAPABILITY_OF}
    return RequestError(MISSING_REQUIRED_CLIENT_CAPABILITY, f"{method}: the upstream needs input this client cannot give "
                        f"({exc.reason})", {"requiredCapabilities": needed})
