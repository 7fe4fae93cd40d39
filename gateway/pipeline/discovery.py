"""Search-based tool discovery (docs/discovery.md): which principals list only a few tools plus
the gateway's `search_tools` and `call_tool`, and what `search_tools` finds within their scope.

The search index (gateway/pipeline/tool_search.py) is built off the event loop once per catalog
version, so a listing refresh, a connector registration or an upstream's `list_changed` (each one
a new catalog version) is searchable with the next query. A search masks every tool the caller's
scope or the policy hides before ranking: it cannot return one, whatever the query says.

`call_tool` itself is not run here: the front unwraps it into a call of the target
(`unwrap_call`) and sends that through the one pipeline (gateway/pipeline/calls.py).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
from mcp_types import INVALID_PARAMS

from ..auth.policy import NO_POLICY, Policy
from ..auth.principals import Identity
from ..auth.scope import PrincipalScope
from ..config.model import DiscoveryConfig, TokenConfig
from ..conventions.effects import DESTRUCTIVE_HINT, IDEMPOTENT_HINT, OPEN_WORLD_HINT, READ_ONLY_HINT
from ..conventions.keys import APPROVAL_KEY, APPROVAL_RECOMMENDED, EFFECT_KEY, Effect
from ..errors import RequestError
from .catalog import Catalog, ToolRoute
from .tool_search import Embedder, ToolIndex, document_of, load_embedder

__all__ = ["CALL_TOOL", "CALL_TOOL_DEFINITION", "SEARCH_TOOLS_DEFINITION", "Discovery", "GATEWAY_TOOLS", "MAX_LIMIT", "SEARCH_TOOLS", "SearchQuery", "build_index", "parse_search", "search_routes",
           "unwrap_call"]

SEARCH_TOOLS = "search_tools"
CALL_TOOL = "call_tool"
GATEWAY_TOOLS = frozenset({SEARCH_TOOLS, CALL_TOOL})
MAX_LIMIT = 20
DEFAULT_LIMIT = 5

_EFFECTS = [e.value for e in Effect]

SEARCH_TOOLS_DEFINITION: dict[str, Any] = {
    "name": SEARCH_TOOLS,
    "title": "Search tools",
    "description": (
        "Find the tools that can do something, by describing it in plain words (\"refund an order\", "
        "\"what time is it in Tokyo\"). Answers the best matches you may call, each with its full "
        "definition; call one by its name (or through call_tool)."),
    "inputSchema": {
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "description": "What you want to do, in plain words."},
            "effect": {"type": "string", "enum": _EFFECTS, "description": "Only tools with this effect."},
            "upstream": {"type": "string", "description": "Only tools of this upstream server."},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT,
                      "description": f"How many tools to answer (at most {MAX_LIMIT})."},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    "annotations": {READ_ONLY_HINT: True, OPEN_WORLD_HINT: False},
    "_meta": {EFFECT_KEY: Effect.READ.value},
}

CALL_TOOL_DEFINITION: dict[str, Any] = {
    "name": CALL_TOOL,
    "title": "Call a tool",
    "description": (
        "Call a tool found with search_tools by its name, with its arguments. The call is the named "
        "tool's call: its effect, approval and idempotency rules apply (send an idempotency key for a write)."),
    "inputSchema": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "description": "The tool's name, as search_tools gave it."},
            "arguments": {"type": "object", "description": "The tool's arguments, as its inputSchema asks."},
        },
        "required": ["name"],
        "additionalProperties": False,
    },
    # The most conservative effect: unclassified (no effect key), approval recommended.
    "annotations": {READ_ONLY_HINT: False, DESTRUCTIVE_HINT: True, IDEMPOTENT_HINT: False, OPEN_WORLD_HINT: True},
    "_meta": {APPROVAL_KEY: APPROVAL_RECOMMENDED},
}


@dataclass(frozen=True, slots=True)
class SearchQuery:
    query: str
    effect: Effect | None = None
    upstream: str | None = None
    limit: int = DEFAULT_LIMIT


def _bad(message: str) -> RequestError:
    return RequestError(INVALID_PARAMS, f"{SEARCH_TOOLS}: {message}")


def parse_search(arguments: Mapping[str, Any]) -> SearchQuery:
    """Checked `search_tools` arguments; RequestError (-32602) naming the bad one."""
    unknown = sorted(set(arguments) - {"query", "effect", "upstream", "limit"})
    if unknown:
        raise _bad(f"unknown argument {unknown[0]!r} (takes query, effect, upstream, limit)")
    query = arguments.get("query")
    if not isinstance(query, str) or not query.strip():
        raise _bad("arguments.query must be a non-empty string")
    effect = arguments.get("effect")
    if effect is not None and effect not in _EFFECTS:
        raise _bad(f"arguments.effect must be one of {', '.join(_EFFECTS)}, not {effect!r}")
    upstream = arguments.get("upstream")
    if upstream is not None and not isinstance(upstream, str):
        raise _bad("arguments.upstream must be a string")
    limit = arguments.get("limit", DEFAULT_LIMIT)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise _bad(f"arguments.limit must be an integer from 1 to {MAX_LIMIT}, not {limit!r}")
    return SearchQuery(query, Effect(effect) if effect is not None else None, upstream, limit)


def unwrap_call(arguments: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The target's name and arguments of a `call_tool` call; RequestError (-32602) when malformed."""
    unknown = sorted(set(arguments) - {"name", "arguments"})
    if unknown:
        raise RequestError(INVALID_PARAMS, f"{CALL_TOOL}: unknown argument {unknown[0]!r} (takes name, arguments)")
    name = arguments.get("name")
    if not isinstance(name, str) or not name:
        raise RequestError(INVALID_PARAMS, f"{CALL_TOOL}: arguments.name must be the name of a tool")
    if name in GATEWAY_TOOLS:
        raise RequestError(INVALID_PARAMS, f"{CALL_TOOL}: arguments.name cannot be {name} itself")
    inner = arguments.get("arguments", {})
    if not isinstance(inner, dict):
        raise RequestError(INVALID_PARAMS, f"{CALL_TOOL}: arguments.arguments must be an object")
    return name, inner


@dataclass(frozen=True)
class _Built:
    version: object
    routes: list[ToolRoute]
    index: ToolIndex


class Discovery:
    """The discovery mode per principal, the `always` tools, and scoped search over the catalog."""

    def __init__(self, config: DiscoveryConfig, tokens: Sequence[TokenConfig], catalog: Catalog,
                 scope: PrincipalScope, policy: Policy = NO_POLICY) -> None:
        self._mode = config.mode
        self._modes = {t.principal: t.discovery.mode for t in tokens if t.discovery is not None}
        self._always = re.compile("|".join(fnmatch.translate(g) for g in config.always)) if config.always else None
        self._catalog = catalog
        self._scope = scope
        self._policy = policy
        self._embedder: Embedder | None = None
        self._built: _Built | None = None
        self._lock = anyio.Lock()

    @property
    def offered(self) -> bool:
        """Whether any principal may be in search mode (the gateway tools exist at all)."""
        return self._mode == "search" or "search" in self._modes.values()

    def searching(self, principal: str) -> bool:
        return self._modes.get(principal, self._mode) == "search"

    def always_listed(self, name: str) -> bool:
        return self._always is not None and self._always.fullmatch(name) is not None

    def visible(self, identity: Identity, route: ToolRoute) -> bool:
        """Whether the caller may see (and call) the tool: its scope, and no policy rule hiding it."""
        if not self._scope.may_use_tool(identity.principal, route.name, route.upstream):
            return False
        return not (self._policy.enabled and self._policy.hides(identity, route.name, route.upstream))

    async def search(self, identity: Identity, query: SearchQuery) -> list[dict[str, Any]]:
        """The best matches within the caller's scope, as their published definitions."""
        built = await self._index()
        visible = [self.visible(identity, r) for r in built.routes]
        found = await anyio.to_thread.run_sync(search_routes, built.index, built.routes, query, visible)
        return [r.definition for r in found]

    async def _index(self) -> _Built:
        version, routes = await self._catalog.tools_snapshot()
        built = self._built
        if built is not None and built.version == version:
            return built
        async with self._lock:
            version, routes = await self._catalog.tools_snapshot()
            if self._built is None or self._built.version != version:
                self._built = _Built(version, routes, await anyio.to_thread.run_sync(self._build, routes))
            return self._built

    def _build(self, routes: list[ToolRoute]) -> ToolIndex:
        if self._embedder is None:
            self._embedder = load_embedder()
        return build_index(routes, self._embedder)


def build_index(routes: Sequence[ToolRoute], embedder: Embedder) -> ToolIndex:
    """The search index over the routes' published definitions (positions follow `routes`)."""
    return ToolIndex([document_of(r.definition) for r in routes], embedder)


def search_routes(index: ToolIndex, routes: Sequence[ToolRoute], query: SearchQuery,
                  visible: Sequence[bool] | None = None) -> list[ToolRoute]:
    """The best `query.limit` routes for the query among the visible ones with its effect and
    upstream (`visible[i]` False: routes[i] is never ranked). Never the gateway's own tools."""
    allowed = [(visible is None or visible[i]) and (query.effect is None or r.effect is query.effect)
               and (query.upstream is None or r.upstream == query.upstream) and r.name not in GATEWAY_TOOLS
               for i, r in enumerate(routes)]
    return [routes[i] for i in index.search(query.query, query.limit, allowed)]
