"""`tools/call` and `tools/list` for every entry: parse the params, answer in the era's wire form.

Both entries (the fast path and the SDK handlers) call these and only parse the request and
write the response themselves; everything between the parsed call and its result (tasks, rounds,
parking included) happens in the pipeline (gateway/pipeline/calls.py), once; here the result
becomes the era's wire dict.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from mcp_types import INTERNAL_ERROR, INVALID_PARAMS

from ..conventions.answers import Answer
from ..pipeline.calls import CallPipeline
from ..pipeline.catalog import Catalog
from ..pipeline.discovery import (
    CALL_TOOL, CALL_TOOL_DEFINITION, SEARCH_TOOLS, SEARCH_TOOLS_DEFINITION, Discovery, parse_search, unwrap_call,
)
from ..pipeline.rounds import round_params
from ..pipeline.stages import Answered, InputRound, TaskCreated, ToolCall
from ..errors import RequestError
from ..protocol import Era, Result
from ..upstreams.relay import CallRelay
from ..auth.policy import NO_POLICY, Policy
from ..auth.principals import Identity
from ..auth.scope import PrincipalScope
from .wire import encode_message, list_result, result_wire, tool_result

__all__ = ["ToolCallRequest", "ToolCalls", "ToolListing", "parse_tool_call"]

logger = logging.getLogger(__name__)

K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class ToolCallRequest:
    """The params of one `tools/call`, checked."""

    name: str
    arguments: dict[str, Any]
    meta: dict[str, Any]
    task: dict[str, Any] | None = None
    # A later round of a multi-round-trip call (2026-07-28): inputResponses and requestState.
    rounds: dict[str, Any] = field(default_factory=dict)


def parse_tool_call(params: Any) -> ToolCallRequest:
    """Checked `tools/call` params; RequestError (-32602) naming the first bad member."""
    if not isinstance(params, dict):
        raise RequestError(INVALID_PARAMS, "tools/call: params must be an object with the tool's name")
    name = params.get("name")
    if not isinstance(name, str) or not name:
        raise RequestError(INVALID_PARAMS, "tools/call: params.name must be a non-empty string")
    arguments = params.get("arguments")
    if arguments is not None and not isinstance(arguments, dict):
        raise RequestError(INVALID_PARAMS, "tools/call: params.arguments must be an object")
    meta = params.get("_meta")
    if meta is not None and not isinstance(meta, dict):
        raise RequestError(INVALID_PARAMS, "tools/call: params._meta must be an object")
    task = params.get("task")
    if task is not None and not isinstance(task, dict):
        raise RequestError(INVALID_PARAMS, "tools/call: params.task must be an object")
    return ToolCallRequest(name, arguments or {}, dict(meta) if meta else {}, task, round_params(params))


class ToolCalls:
    """Answers `tools/call` for a principal: the pipeline's result in the era's wire form."""

    def __init__(self, pipeline: CallPipeline, server_info: Mapping[str, Any],
                 discovery: Discovery | None = None) -> None:
        self._pipeline = pipeline
        self._server_info = server_info
        self._discovery = discovery

    async def result(self, identity: Identity, request: ToolCallRequest, relay: CallRelay | None, *, era: Era) -> Result:
        """The wire result; raises RequestError (the JSON-RPC error to answer instead).

        A principal in discovery's search mode also has the gateway's `search_tools` (answered
        here) and `call_tool`, which becomes a call of its target, sent through the same pipeline
        with the client's `_meta` (its idempotency key fences the target call)."""
        discovery = self._discovery
        if discovery is not None and request.name in (SEARCH_TOOLS, CALL_TOOL) and discovery.searching(identity.principal):
            if request.name == SEARCH_TOOLS:
                return await self._search(discovery, identity, request, era)
            name, arguments = unwrap_call(request.arguments)
            request = replace(request, name=name, arguments=arguments)
        call = ToolCall(principal=identity.principal, name=request.name, arguments=request.arguments, meta=request.meta,
                        relay=relay, era=era, task=request.task, rounds=request.rounds, identity=identity)
        try:
            result = await self._pipeline.call(call)
        except RequestError:
            raise
        except Exception:
            # A gateway bug: logged with its traceback, answered without one.
            logger.exception("tools/call %s failed inside the gateway", request.name)
            raise RequestError(INTERNAL_ERROR, "internal gateway error; see the gateway log") from None
        match result:
            case TaskCreated():
                return result.result  # in its era's form already
            case InputRound():
                return result_wire(result.result, era=era, server_info=self._server_info)
            case Answered():
                return tool_result(result.answer, era=era, server_info=self._server_info)

    async def _search(self, discovery: Discovery, identity: Identity, request: ToolCallRequest, era: Era) -> Result:
        query = parse_search(request.arguments)
        tools = [_for_era(t, era) for t in await discovery.search(identity, query)]
        lines = [f"{len(tools)} tool(s) for {query.query!r}:"]
        lines += [f"- {t['name']}: {str(t.get('description') or '').splitlines()[0] if t.get('description') else ''}"
                  for t in tools]
        answer = Answer(content=[{"type": "text", "text": "\n".join(lines)}], structured_content={"tools": tools})
        return tool_result(answer, era=era, server_info=self._server_info)


class ToolListing:
    """The merged `tools/list` result, built and encoded once per catalog version, principal
    scope, set of tools the policy hides, and era (1,000 tools are a 300 KB answer: never rebuilt
    per request).

    A tool that a deny rule refuses this caller without reading the arguments is left out
    (gateway/auth/policy.py). Which tools are hidden is worked out once per policy key (only what
    such rules read of the caller: the principal, the claims they name, the scopes) and kept as a
    small set; callers whose hidden sets are equal share one encoded listing, so many callers from
    an identity provider do not make many copies of it. Both maps keep at most `max_entries` (the
    oldest goes first)."""

    def __init__(self, catalog: Catalog, scope: PrincipalScope, server_info: Mapping[str, Any],
                 policy: Policy = NO_POLICY, *, max_entries: int = 1024, discovery: Discovery | None = None) -> None:
        self._catalog = catalog
        self._discovery = discovery
        self._scope = scope
        self._policy = policy
        self._server_info = server_info
        self._max_entries = max_entries
        self._version: object = None
        self._hidden: dict[tuple[Any, Any], frozenset[str]] = {}
        self._cache: dict[tuple[Any, frozenset[str], Era, bool], tuple[dict[str, Any], bytes]] = {}

    async def result(self, identity: Identity, *, era: Era) -> dict[str, Any]:
        """The result dict (a fresh top level: callers may add to it)."""
        return dict((await self._entry(identity, era))[0])

    async def encoded(self, identity: Identity, *, era: Era) -> bytes:
        """The result as JSON bytes, encoded as this era's transport encodes results."""
        return (await self._entry(identity, era))[1]

    async def _entry(self, identity: Identity, era: Era) -> tuple[dict[str, Any], bytes]:
        version, routes = await self._catalog.tools_snapshot()
        if version != self._version:
            self._version, self._hidden, self._cache = version, {}, {}
        principal = identity.principal
        scope_key = self._scope.key(principal)
        hidden = frozenset[str]()
        if self._policy.enabled:
            hidden_key = (scope_key, self._policy.listing_key(identity))
            found = self._hidden.get(hidden_key)
            if found is None:
                found = frozenset(r.name for r in routes if self._scope.may_use_tool(principal, r.name, r.upstream)
                                  and self._policy.hides(identity, r.name, r.upstream))
                _bounded_put(self._hidden, hidden_key, found, self._max_entries)
            hidden = found
        discovery = self._discovery
        searching = discovery is not None and discovery.searching(principal)
        key = (scope_key, hidden, era, searching)
        entry = self._cache.get(key)
        if entry is None:
            tools = [_for_era(r.definition, era) for r in routes
                     if r.name not in hidden and self._scope.may_use_tool(principal, r.name, r.upstream)]
            if discovery is not None and searching:
                # Search mode (docs/discovery.md): the `always` tools, then the gateway's two.
                tools = [t for t in tools if discovery.always_listed(t["name"]) and t["name"] not in (SEARCH_TOOLS, CALL_TOOL)]
                tools += [SEARCH_TOOLS_DEFINITION, CALL_TOOL_DEFINITION]
            result = list_result("tools", tools, era=era, server_info=self._server_info)
            entry = (result, encode_message(result, era=era))
            _bounded_put(self._cache, key, entry, self._max_entries)
        return entry


def _bounded_put(cache: dict[K, V], key: K, value: V, limit: int) -> None:
    if len(cache) >= limit:
        del cache[next(iter(cache))]
    cache[key] = value


def _for_era(definition: dict[str, Any], era: Era) -> dict[str, Any]:
    """2026-07-28 tools carry no `execution` (tasks are an extension there; the server decides)."""
    if era is Era.MODERN and "execution" in definition:
        return {k: v for k, v in definition.items() if k != "execution"}
    return definition
