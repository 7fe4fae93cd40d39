"""The aggregated view of every exposed tool, resource and prompt, and where each one routes.

Listings come from each upstream's cache (and the connector registry); the catalog is rebuilt
only when one of them changed, so tools/call resolves a name with one dict lookup.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import mcp_types as types
from mcp.shared.inbound import X_MCP_HEADER_KEY
from pydantic import ValidationError

from ..config.model import HttpUpstreamConfig, StdioUpstreamConfig
from ..conventions.answers import Dispatched
from ..conventions.effects import Classification, ToolPolicy, classify_tool, publish_annotations, publish_tool_meta
from ..conventions.keys import Effect
from ..conventions.naming import exposed_tool_name
from ..pins.service import ToolPins
from ..upstreams.listing import ListingCache, ListKind

__all__ = [
    "Catalog", "ConnectorSource", "ConnectorToolLike", "PromptRoute", "ResourceRoute", "SETTLE_SECONDS",
    "TemplateRoute", "ToolRoute",
]

logger = logging.getLogger(__name__)

# Tool definition fields passed on as the upstream wrote them.
_TOOL_FIELDS = ("title", "description", "inputSchema", "outputSchema", "icons")


class ConnectorToolLike(Protocol):
    """What the catalog needs of a connector operation (gateway.connectors.ConnectorTool)."""

    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def input_schema(self) -> dict[str, Any]: ...
    @property
    def effect(self) -> Effect: ...
    @property
    def requires_approval(self) -> bool: ...

    async def dispatch(
        self, arguments: dict[str, Any], *, idempotency_key: str | None, fence_id: str | None, takeover: bool
    ) -> Dispatched: ...


class ConnectorSource(Protocol):
    @property
    def version(self) -> int: ...

    def tools(self) -> Sequence[ConnectorToolLike]: ...


@dataclass(frozen=True, slots=True)
class ToolRoute:
    """One exposed tool: what we publish, how it is classified, and where a call goes."""

    name: str
    definition: dict[str, Any]
    classification: Classification
    upstream: str | None = None  # None: a connector operation
    target: str = ""  # the upstream's own tool name
    keyless_writes: str = "reject"
    scope_forwarded_keys: bool = True
    max_attempts: int = 3
    connector: ConnectorToolLike | None = None
    # The input schema marks arguments that a 2026-07-28 client mirrors in Mcp-Param-* headers.
    declares_header_params: bool = False
    # The upstream tool's execution.taskSupport: forbidden, optional or required (gateway/tasks/).
    task_support: str = "forbidden"

    @property
    def effect(self) -> Effect:
        return self.classification.effect


@dataclass(frozen=True, slots=True)
class PromptRoute:
    name: str
    definition: dict[str, Any]
    upstream: str
    target: str


@dataclass(frozen=True, slots=True)
class ResourceRoute:
    definition: dict[str, Any]
    upstream: str


@dataclass(frozen=True, slots=True)
class TemplateRoute:
    definition: dict[str, Any]
    upstream: str
    pattern: re.Pattern[str]


@dataclass
class _Built:
    key: tuple[int, ...] = (-1,)
    tools: dict[str, ToolRoute] = field(default_factory=dict)
    # Tools withheld for review (pinning: hold; gateway/pins/): exposed name -> the text their calls get.
    held: dict[str, tuple[ToolRoute, str]] = field(default_factory=dict)
    prompts: dict[str, PromptRoute] = field(default_factory=dict)
    resources: dict[str, ResourceRoute] = field(default_factory=dict)
    templates: list[TemplateRoute] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Part:
    """One upstream's routes before the merge, made again only when its listings changed."""

    version: int
    pins_version: int
    tools: list[ToolRoute]
    held: list[tuple[ToolRoute, str]]
    prompts: list[PromptRoute]
    resources: list[tuple[str, ResourceRoute]]  # (uri, route)
    templates: list[TemplateRoute]


# A listing change schedules one rebuild this long after it, so the changes of many upstreams
# listed at about the same time (start) make one rebuild, not one each.
SETTLE_SECONDS = 0.05

UpstreamConfig = StdioUpstreamConfig | HttpUpstreamConfig


class Catalog:
    def __init__(
        self,
        caches: Sequence[ListingCache],
        connectors: ConnectorSource | None = None,
        on_change: Callable[[], None] | None = None,
        *,
        augment_tasks: bool = False,
        on_lists_changed: Callable[[frozenset[str]], object] | None = None,
        spawn: Callable[[Callable[[], Coroutine[Any, Any, None]]], object] | None = None,
        pins: ToolPins | None = None,
    ) -> None:
        # True: the gateway runs any tool as a task for a client that asks, and says so in every
        # tool's execution.taskSupport (optional, or the upstream's required).
        self._augment_tasks = augment_tasks
        self._caches = list(caches)
        self._connectors = connectors
        self._on_change = on_change
        # Called with the kinds ("tools", "prompts", "resources") whose published definitions changed.
        self._on_lists_changed = on_lists_changed
        self._built = _Built()
        self._warned: set[tuple[str, ...]] = set()
        # Per upstream (config order): its routes, kept until its listing version changes.
        self._parts: list[_Part | None] = [None] * len(self._caches)
        # Starts the coalesced rebuild after a listing change; None: rebuild at once.
        self._spawn = spawn
        self._rebuild_scheduled = False
        # Merges of the per-upstream routes so far (dex_gateway_catalog_rebuilds_total).
        self.rebuilds = 0
        for cache in self._caches:
            cache.on_update = self._listing_changed
        # Each upstream tool's definition checked against its pin (gateway/pins/); None: pinning off.
        self._pins = pins
        if pins is not None:
            pins.on_reviewed = self._listing_changed

    # -- reading --------------------------------------------------------------------------

    async def tools(self) -> list[ToolRoute]:
        await self._refresh(ListKind.TOOLS)
        return list(self._built.tools.values())

    async def tools_snapshot(self) -> tuple[object, list[ToolRoute]]:
        """The tools and a version token that changes whenever they may have changed."""
        await self._refresh(ListKind.TOOLS)
        built = self._built
        return built.key, list(built.tools.values())

    def peek_tool(self, name: str) -> ToolRoute | None:
        """The route of a tool already known, without waiting for any listing."""
        return self._built.tools.get(name)

    def input_schema(self, name: str) -> dict[str, Any] | None:
        """The published inputSchema of a known tool (the SDK checks Mcp-Param-* headers with it)."""
        route = self._built.tools.get(name)
        return route.definition.get("inputSchema") if route is not None else None

    def held(self, name: str) -> tuple[ToolRoute, str] | None:
        """A tool withheld for review (pinning: hold): its route and the text its calls get."""
        return self._built.held.get(name)

    async def tool(self, name: str) -> ToolRoute | None:
        """The route of an exposed tool; listings are awaited only for a name not yet known."""
        self.refresh_routes()
        route = self._built.tools.get(name)
        if route is None:
            await self._refresh(ListKind.TOOLS)
            route = self._built.tools.get(name)
        return route

    async def prompts(self) -> list[PromptRoute]:
        await self._refresh(ListKind.PROMPTS)
        return list(self._built.prompts.values())

    async def prompt(self, name: str) -> PromptRoute | None:
        await self._refresh(ListKind.PROMPTS)
        return self._built.prompts.get(name)

    async def resources(self) -> list[ResourceRoute]:
        # The templates too: a resource that an earlier upstream's template matches is not listed.
        await self._refresh(ListKind.RESOURCES, ListKind.RESOURCE_TEMPLATES)
        return list(self._built.resources.values())

    async def resource_templates(self) -> list[TemplateRoute]:
        await self._refresh(ListKind.RESOURCE_TEMPLATES)
        return list(self._built.templates)

    async def resource_upstream(self, uri: str) -> str | None:
        """Which upstream serves `uri`: the first in config order that lists it or has a template
        matching it. A listed resource is checked first: one that a template of an earlier upstream
        matches is never listed (`_shadowed`), so a listed URI belongs to the upstream that lists it."""
        await self._refresh(ListKind.RESOURCES, ListKind.RESOURCE_TEMPLATES)
        if (route := self._built.resources.get(uri)) is not None:
            return route.upstream
        for template in self._built.templates:
            if template.pattern.fullmatch(uri):
                return template.upstream
        return None

    def upstream_names(self) -> list[str]:
        return [c.upstream.name for c in self._caches]

    # -- building -------------------------------------------------------------------------

    async def _refresh(self, *kinds: ListKind) -> None:
        waiting = []
        for cache in self._caches:
            for kind in kinds:
                if cache.peek(kind) is None:
                    waiting.append((cache, kind))
                else:
                    await cache.get(kind)  # answers at once (and may start a background refresh)
        if waiting:
            async with anyio.create_task_group() as tg:
                for cache, kind in waiting:
                    tg.start_soon(cache.get, kind)
        self.refresh_routes()

    def _listing_changed(self) -> None:
        """A cache's listing changed: one rebuild for every change within the settle window."""
        if self._spawn is None:
            self.refresh_routes()
        elif not self._rebuild_scheduled:
            self._rebuild_scheduled = True
            self._spawn(self._settled_rebuild)

    async def _settled_rebuild(self) -> None:
        try:
            await anyio.sleep(SETTLE_SECONDS)
        finally:
            self._rebuild_scheduled = False
        self.refresh_routes()

    def refresh_routes(self) -> None:
        """Rebuild the routes if a listing or the connector set changed since the last build."""
        key = tuple(c.version for c in self._caches) + ((self._connectors.version,) if self._connectors else ()) + \
            ((self._pins.version,) if self._pins is not None else ())
        if key == self._built.key:
            return
        first_build = self._built.key == (-1,)
        old = self._built
        self._built = self._build(key)
        self.rebuilds += 1
        if first_build:
            return
        if set(self._built.tools) != set(old.tools) and self._on_change is not None:
            self._on_change()
        changed = frozenset(kind for kind, (before, after) in _published(old, self._built).items() if before != after)
        if changed and self._on_lists_changed is not None:
            self._on_lists_changed(changed)

    def _warn_once(self, key: tuple[str, ...], message: str, *args: Any) -> None:
        """A collision is logged when first seen, not on every rebuild of the routes."""
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(message, *args)

    def _taken(self, kind: str, upstream: str, key: str, earlier: str | None) -> bool:
        """Whether `key` is already served (by the upstream `earlier`): the first upstream in config
        order wins; a clash with another upstream is warned about once."""
        if earlier is None:
            return False
        if earlier != upstream:
            self._warn_once((kind, upstream, key),
                            "%s %r of upstream %s is also served by upstream %s, which comes first; left out",
                            kind, key, upstream, earlier)
        return True

    def _part(self, index: int) -> _Part:
        """The routes of one upstream, from its listings (reused while its version stands)."""
        cache = self._caches[index]
        part = self._parts[index]
        pins_version = self._pins.version if self._pins is not None else 0
        if part is not None and part.version == cache.version and part.pins_version == pins_version:
            return part
        cfg = cache.upstream.config
        listed = list(cache.peek(ListKind.TOOLS) or ())
        withheld = self._pins.check(cfg.name, listed) if self._pins is not None else {}
        tools, held = [], []
        for tool in listed:
            route = _tool_route(cfg, tool, self._augment_tasks)
            if route is None:
                continue
            if route.target in withheld:
                held.append((route, withheld[route.target]))
            else:
                tools.append(route)
        prompts = []
        for prompt in cache.peek(ListKind.PROMPTS) or ():
            name = prompt.get("name")
            if isinstance(name, str):
                exposed = exposed_tool_name(cfg.name, name, cfg.prefix)
                prompts.append(PromptRoute(exposed, {**prompt, "name": exposed}, cfg.name, name))
        resources = []
        for resource in cache.peek(ListKind.RESOURCES) or ():
            uri, name = resource.get("uri"), resource.get("name")
            if isinstance(uri, str):
                definition = dict(resource)
                if isinstance(name, str):
                    definition["name"] = exposed_tool_name(cfg.name, name, cfg.prefix)
                resources.append((uri, ResourceRoute(definition, cfg.name)))
        templates = []
        for template in cache.peek(ListKind.RESOURCE_TEMPLATES) or ():
            uri_template, name = template.get("uriTemplate"), template.get("name")
            if isinstance(uri_template, str):
                definition = dict(template)
                if isinstance(name, str):
                    definition["name"] = exposed_tool_name(cfg.name, name, cfg.prefix)
                templates.append(TemplateRoute(definition, cfg.name, _template_pattern(uri_template)))
        part = _Part(cache.version, pins_version, tools, held, prompts, resources, templates)
        self._parts[index] = part
        return part

    def _shadowed(self, upstream: str, uri: str, earlier_templates: list[TemplateRoute]) -> bool:
        """Whether an earlier upstream's template matches the concrete resource `uri` of `upstream`:
        the first upstream in config order that serves a URI (listed or by template) owns it, so
        the later one's resource is left out (warned about once)."""
        for template in earlier_templates:
            if template.upstream != upstream and template.pattern.fullmatch(uri):
                self._warn_once(("resource", upstream, uri),
                                "resource %r of upstream %s is also served by upstream %s (template %r), which "
                                "comes first; left out", uri, upstream, template.upstream,
                                template.definition.get("uriTemplate"))
                return True
        return False

    def _build(self, key: tuple[int, ...]) -> _Built:
        """Merge the upstreams' routes in config order (the first wins a name); only the routes of
        an upstream whose listing changed are made again, so a rebuild is linear in the routes."""
        built = _Built(key=key)
        template_upstreams: dict[str, str] = {}
        for index, cache in enumerate(self._caches):
            cfg = cache.upstream.config
            part = self._part(index)
            for route in part.tools:
                if route.name in built.tools:
                    self._warn_once(
                        ("tool", cfg.name, route.name),
                        "tool %r of upstream %s collides with an earlier tool of the same exposed name; left out",
                        route.target,
                        cfg.name,
                    )
                    continue
                built.tools[route.name] = route
            for route, text in part.held:
                built.held.setdefault(route.name, (route, text))
            for prompt_route in part.prompts:
                earlier_prompt = built.prompts.get(prompt_route.name)
                if not self._taken("prompt", cfg.name, prompt_route.name, earlier_prompt.upstream if earlier_prompt else None):
                    built.prompts[prompt_route.name] = prompt_route
            for uri, resource_route in part.resources:
                earlier_resource = built.resources.get(uri)
                if not self._taken("resource", cfg.name, uri, earlier_resource.upstream if earlier_resource else None) \
                        and not self._shadowed(cfg.name, uri, built.templates):
                    built.resources[uri] = resource_route
            for template_route in part.templates:
                uri_template = template_route.definition["uriTemplate"]
                if not self._taken("resource template", cfg.name, uri_template, template_upstreams.get(uri_template)):
                    template_upstreams[uri_template] = cfg.name
                    built.templates.append(template_route)
        for connector_tool in self._connectors.tools() if self._connectors else ():
            if connector_tool.name in built.tools:
                logger.warning("connector tool %r collides with an upstream tool; left out", connector_tool.name)
                continue
            built.tools[connector_tool.name] = _connector_route(connector_tool, self._augment_tasks)
        return built


def _published(old: _Built, new: _Built) -> dict[str, tuple[Any, Any]]:
    """What clients see of each list kind, before and after a rebuild."""
    return {
        "tools": ([r.definition for r in old.tools.values()], [r.definition for r in new.tools.values()]),
        "prompts": ([r.definition for r in old.prompts.values()], [r.definition for r in new.prompts.values()]),
        "resources": (
            ([r.definition for r in old.resources.values()], [t.definition for t in old.templates]),
            ([r.definition for r in new.resources.values()], [t.definition for t in new.templates]),
        ),
    }


def _task_support(tool: dict[str, Any]) -> str:
    execution = tool.get("execution")
    support = execution.get("taskSupport") if isinstance(execution, dict) else None
    return support if support in ("optional", "required") else "forbidden"


def _published_execution(task_support: str, augment: bool) -> dict[str, Any] | None:
    if task_support == "required" or (augment and task_support == "forbidden"):
        return {"taskSupport": "required" if task_support == "required" else "optional"}
    return {"taskSupport": task_support} if task_support != "forbidden" else None


def _tool_route(cfg: UpstreamConfig, tool: dict[str, Any], augment_tasks: bool = False) -> ToolRoute | None:
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        logger.warning("upstream %s listed a tool without a name; left out", cfg.name)
        return None
    exposed = exposed_tool_name(cfg.name, name, cfg.prefix)
    policy_cfg = cfg.tool_policies.get(exposed) or cfg.tool_policies.get(name)
    policy = ToolPolicy(policy_cfg.effect, policy_cfg.requires_approval) if policy_cfg else None
    meta = tool.get("_meta") if isinstance(tool.get("_meta"), dict) else None
    annotations = tool.get("annotations") if isinstance(tool.get("annotations"), dict) else None
    classification = classify_tool(
        meta,
        annotations,
        trusts_annotations=cfg.trusts_tool_annotations,
        default_effect=cfg.default_tool_effect,
        policy=policy,
    )
    for warning in classification.warnings:
        logger.warning("upstream %s tool %s: %s", cfg.name, name, warning)
    definition: dict[str, Any] = {"name": exposed}
    for key in _TOOL_FIELDS:
        if key in tool:
            definition[key] = tool[key]
    definition.setdefault("inputSchema", {"type": "object"})
    definition["annotations"] = publish_annotations(annotations, classification, trusted=cfg.trusts_tool_annotations)
    definition["_meta"] = publish_tool_meta(meta, classification)
    task_support = _task_support(tool)
    if (execution := _published_execution(task_support, augment_tasks)) is not None:
        definition["execution"] = execution
    try:
        types.Tool.model_validate(definition)
    except ValidationError as exc:
        # Checked once per listing, so a tools/list answer is never refused for one bad tool.
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        logger.warning("upstream %s listed tool %r with an invalid definition (%s: %s); left out", cfg.name, name, where, first["msg"])
        return None
    return ToolRoute(
        name=exposed,
        definition=definition,
        classification=classification,
        upstream=cfg.name,
        target=name,
        keyless_writes=cfg.keyless_writes,
        scope_forwarded_keys=cfg.scope_forwarded_keys,
        max_attempts=cfg.max_attempts,
        declares_header_params=_declares_header_params(definition["inputSchema"]),
        task_support=task_support,
    )


def _connector_route(tool: ConnectorToolLike, augment_tasks: bool = False) -> ToolRoute:
    classification = Classification(tool.effect, tool.requires_approval, declared=True)
    definition = {
        "name": tool.name,
        "description": tool.description,
        "inputSchema": tool.input_schema,
        "annotations": publish_annotations(None, classification, trusted=True),
        "_meta": publish_tool_meta(None, classification),
    }
    if augment_tasks:
        definition["execution"] = {"taskSupport": "optional"}
    return ToolRoute(
        name=tool.name,
        definition=definition,
        classification=classification,
        connector=tool,
        declares_header_params=_declares_header_params(tool.input_schema),
    )


def _declares_header_params(schema: Any) -> bool:
    return X_MCP_HEADER_KEY in json.dumps(schema)


def _template_pattern(uri_template: str) -> re.Pattern[str]:
    """A regex for the URIs an RFC 6570 template can produce (each expression: any run of text)."""
    parts = re.split(r"\{[^}]*\}", uri_template)
    return re.compile(".+?".join(re.escape(p) for p in parts))
