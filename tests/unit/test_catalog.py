"""The Catalog against in-memory listings: exposed names and prefixes, the 64-character cut,
collisions, connector tools, classification and what is published per route, tool policies,
prompts/resources/templates routing, and when routes are rebuilt and `on_change` is called.

`FakeListing` stands in for a `ListingCache` (what the catalog uses of it: `.upstream.config`,
`.upstream.name`, `.peek(kind)`, `.get(kind)`, `.version`, `.on_update`); `FakeConnectors`
for the connector registry (`.version`, `.tools()`). The effect rules themselves are covered
case by case by the conventions fixtures (tests/unit/test_conventions_fixtures.py); here only
that the catalog applies them per upstream and publishes the result.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from gateway.pipeline.catalog import Catalog
from gateway.config.model import HttpUpstreamConfig, StdioUpstreamConfig
from gateway.conventions.keys import APPROVAL_KEY, EFFECT_KEY, Effect
from gateway.upstreams.listing import ListKind

pytestmark = pytest.mark.anyio

R, IW, NIW = "read", "idempotent_write", "non_idempotent_write"


# -- fakes ------------------------------------------------------------------------------------


def stdio(name: str, **options: Any) -> StdioUpstreamConfig:
    return StdioUpstreamConfig(name=name, transport="stdio", command="python", **options)


def http(name: str, **options: Any) -> HttpUpstreamConfig:
    return HttpUpstreamConfig(name=name, transport="streamable_http", url=f"http://127.0.0.1:9/{name}", **options)


def tool(name: str, *, effect: str | None = None, approval: Any = ..., annotations: dict[str, Any] | None = None,
         **fields: Any) -> dict[str, Any]:
    """A tool definition as an upstream lists it (wire dict)."""
    meta: dict[str, Any] = dict(fields.pop("_meta", None) or {})
    definition: dict[str, Any] = {"name": name, "inputSchema": {"type": "object"}, **fields}
    if effect is not None:
        meta[EFFECT_KEY] = effect
    if approval is not ...:
        meta[APPROVAL_KEY] = approval
    if meta:
        definition["_meta"] = meta
    if annotations is not None:
        definition["annotations"] = annotations
    return definition


class FakeListing:
    """An upstream's cached listings, in memory.

    `listings` are what `peek` shows now; `on_get` (kind -> items) is a listing that arrives
    when `get(kind)` is awaited (the first fetch), bumping `version` and calling `on_update`
    as the real cache does after a fetch that changed something."""

    def __init__(self, config: StdioUpstreamConfig | HttpUpstreamConfig, *, tools: list[dict[str, Any]] | None = None,
                 prompts: list[dict[str, Any]] | None = None, resources: list[dict[str, Any]] | None = None,
                 templates: list[dict[str, Any]] | None = None) -> None:
        self.upstream = SimpleNamespace(config=config, name=config.name)
        self.listings: dict[ListKind, list[dict[str, Any]] | None] = {
            ListKind.TOOLS: tools, ListKind.PROMPTS: prompts, ListKind.RESOURCES: resources,
            ListKind.RESOURCE_TEMPLATES: templates,
        }
        self.version = 0 if all(v is None for v in self.listings.values()) else 1
        self.on_update: Any = None
        self.on_get: dict[ListKind, list[dict[str, Any]]] = {}
        self.gets: Counter[ListKind] = Counter()

    def peek(self, kind: ListKind) -> list[dict[str, Any]] | None:
        return self.listings[kind]

    async def get(self, kind: ListKind) -> list[dict[str, Any]] | None:
        self.gets[kind] += 1
        if kind in self.on_get:
            self.publish(kind, self.on_get.pop(kind))
        return self.listings[kind]

    def publish(self, kind: ListKind, items: list[dict[str, Any]] | None) -> None:
        """A fetch that changed the listing: new items, a new version, the update callback."""
        self.listings[kind] = items
        self.version += 1
        if self.on_update is not None:
            self.on_update()


@dataclass
class FakeConnectorTool:
    name: str
    effect: Effect = Effect.READ
    requires_approval: bool = False
    description: str = "A reviewed operation."
    input_schema: dict[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {"id": {"type": "string"}}})

    async def dispatch(self, arguments: dict[str, Any], *, idempotency_key: str | None, fence_id: str | None,
                       takeover: bool) -> Any:
        raise AssertionError("the catalog never dispatches")


class FakeConnectors:
    def __init__(self, *tools: FakeConnectorTool) -> None:
        self._tools = list(tools)
        self.version = 1

    def tools(self) -> list[FakeConnectorTool]:
        return list(self._tools)

    def replace(self, *tools: FakeConnectorTool) -> None:
        self._tools = list(tools)
        self.version += 1


def published(definition: dict[str, Any]) -> tuple[str | None, bool, dict[str, Any]]:
    """(published effect key, asks approval, annotations) of a published tool definition."""
    meta = definition["_meta"]
    return meta.get(EFFECT_KEY), meta.get(APPROVAL_KEY) == "recommended", definition["annotations"]


# -- exposed names ----------------------------------------------------------------------------


async def test_tools_are_exposed_as_server__tool_and_route_to_their_upstream() -> None:
    pay = FakeListing(stdio("pay"), tools=[tool("get_balance", effect=R), tool("send payment/v2", effect=NIW)])
    notes = FakeListing(http("notes"), tools=[tool("get_balance")])
    catalog = Catalog([pay, notes])

    routes = {r.name: r for r in await catalog.tools()}

    assert list(routes) == ["pay__get_balance", "pay__send_payment_v2", "notes__get_balance"]
    assert [(r.upstream, r.target) for r in routes.values()] == [
        ("pay", "get_balance"), ("pay", "send payment/v2"), ("notes", "get_balance")]
    assert routes["pay__send_payment_v2"].definition["name"] == "pay__send_payment_v2"
    assert all(r.connector is None for r in routes.values())
    assert catalog.upstream_names() == ["pay", "notes"]


async def test_prefix_overrides_the_server_prefix_and_empty_exposes_own_names() -> None:
    main = FakeListing(http("main", prefix=""), tools=[tool("get_balance")], prompts=[{"name": "letter"}])
    short = FakeListing(stdio("payments-eu", prefix="eu_"), tools=[tool("get_balance")])
    catalog = Catalog([main, short])

    routes = {r.name: r for r in await catalog.tools()}

    assert list(routes) == ["get_balance", "eu_get_balance"]
    assert (routes["get_balance"].upstream, routes["get_balance"].target) == ("main", "get_balance")
    assert (routes["eu_get_balance"].upstream, routes["eu_get_balance"].target) == ("payments-eu", "get_balance")
    assert [p.name for p in await catalog.prompts()] == ["letter"]


async def test_a_name_over_64_characters_is_cut_and_ends_with_a_hash_of_the_full_name() -> None:
    # A replaced character too: the hash is of the full name as listed, before sanitising.
    long_a = "summarise_every_open_invoice_of_the_customer.account_" + "a" * 20
    long_b = "summarise_every_open_invoice_of_the_customer.account_" + "b" * 20
    cfg = stdio("billing")
    catalog = Catalog([FakeListing(cfg, tools=[tool(long_a), tool(long_b)])])

    routes = await catalog.tools()

    assert len(routes) == 2  # two names that differ only after the cut stay two tools
    for route, original in zip(routes, (long_a, long_b), strict=True):
        full = f"billing__{original}"
        digest = hashlib.sha256(full.encode()).hexdigest()[:8]
        assert len(route.name) == 64
        assert route.name == full[:55].replace(".", "_") + "_" + digest
        assert route.target == original
        assert await catalog.tool(route.name) is route


# -- collisions -------------------------------------------------------------------------------


async def test_collision_first_upstream_in_config_order_wins_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    first = FakeListing(http("first", prefix=""))
    second = FakeListing(stdio("second", prefix=""), tools=[tool("get_balance", description="second's")])
    catalog = Catalog([first, second])
    assert [r.upstream for r in await catalog.tools()] == ["second"]
    second.publish(ListKind.TOOLS, [tool("get_balance", description="second's, refreshed")])

    # The first upstream's listing arrives later: it still wins, being first in config order.
    with caplog.at_level(logging.WARNING, logger="gateway.pipeline.catalog"):
        first.publish(ListKind.TOOLS, [tool("get_balance", description="first's"), tool("refund")])

    routes = {r.name: r for r in await catalog.tools()}
    assert list(routes) == ["get_balance", "refund"]
    assert routes["get_balance"].upstream == "first"
    assert routes["get_balance"].definition["description"] == "first's"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["tool 'get_balance' of upstream second collides with an earlier tool of the same exposed "
                        "name; left out"]


async def test_names_that_sanitise_alike_collide_within_one_upstream(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="gateway.pipeline.catalog"):
        catalog = Catalog([FakeListing(stdio("pay"), tools=[tool("get.balance"), tool("get_balance")])])
        routes = await catalog.tools()
    assert [(r.name, r.target) for r in routes] == [("pay__get_balance", "get.balance")]
    assert "tool 'get_balance' of upstream pay collides" in caplog.text


async def test_a_tool_without_a_name_is_left_out_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="gateway.pipeline.catalog"):
        catalog = Catalog([FakeListing(stdio("pay"), tools=[{"inputSchema": {"type": "object"}}, tool("ok")])])
        routes = await catalog.tools()
    assert [r.name for r in routes] == ["pay__ok"]
    assert "upstream pay listed a tool without a name; left out" in caplog.text


async def test_an_upstream_that_cannot_be_listed_is_left_out() -> None:
    broken = FakeListing(stdio("broken"))  # its listing failed: get() and peek() give None
    pay = FakeListing(stdio("pay"), tools=[tool("get_balance")])
    catalog = Catalog([broken, pay])
    assert [r.name for r in await catalog.tools()] == ["pay__get_balance"]
    assert broken.gets[ListKind.TOOLS] == 1


# -- connector tools --------------------------------------------------------------------------


async def test_connector_tools_are_listed_after_upstream_tools_with_their_own_names() -> None:
    crm = FakeConnectors(FakeConnectorTool("crm_list_story_ids", Effect.READ),
                         FakeConnectorTool("crm_refund", Effect.NON_IDEMPOTENT_WRITE, requires_approval=True),
                         FakeConnectorTool("crm_tag", Effect.IDEMPOTENT_WRITE))
    catalog = Catalog([FakeListing(stdio("pay"), tools=[tool("get_balance", effect=R)])], connectors=crm)

    routes = {r.name: r for r in await catalog.tools()}

    assert list(routes) == ["pay__get_balance", "crm_list_story_ids", "crm_refund", "crm_tag"]
    refund = routes["crm_refund"]
    assert refund.upstream is None and refund.connector is crm.tools()[1]
    assert refund.definition["description"] == "A reviewed operation."
    assert refund.definition["inputSchema"] == {"type": "object", "properties": {"id": {"type": "string"}}}
    assert (refund.effect, refund.classification.requires_approval, refund.classification.declared) == (
        Effect.NON_IDEMPOTENT_WRITE, True, True)
    assert published(refund.definition) == (NIW, True, {"readOnlyHint": False, "idempotentHint": False})
    assert published(routes["crm_list_story_ids"].definition) == (R, False, {"readOnlyHint": True})
    assert published(routes["crm_tag"].definition) == (IW, False, {"readOnlyHint": False, "idempotentHint": True})


async def test_a_connector_tool_named_like_an_upstream_tool_is_left_out(caplog: pytest.LogCaptureFixture) -> None:
    crm = FakeConnectors(FakeConnectorTool("get_balance", Effect.NON_IDEMPOTENT_WRITE), FakeConnectorTool("crm_tag"))
    with caplog.at_level(logging.WARNING, logger="gateway.pipeline.catalog"):
        catalog = Catalog([FakeListing(http("main", prefix=""), tools=[tool("get_balance", effect=R)])], connectors=crm)
        routes = {r.name: r for r in await catalog.tools()}
    assert list(routes) == ["get_balance", "crm_tag"]
    assert routes["get_balance"].upstream == "main" and routes["get_balance"].effect is Effect.READ
    assert "connector tool 'get_balance' collides with an upstream tool; left out" in caplog.text


# -- classification and what is published ------------------------------------------------------


async def test_each_route_is_classified_and_published_per_its_upstream() -> None:
    trusted = FakeListing(stdio("pay", keyless_writes="pass", scope_forwarded_keys=False, max_attempts=2), tools=[
        tool("get_balance", effect=R, annotations={"readOnlyHint": False, "title": "Balance"}),
        tool("refund", effect=NIW, approval="recommended"),
        tool("set_memo", effect=IW, approval=None),                      # any approval value asks
        tool("list_notes", annotations={"readOnlyHint": True}),
        tool("put_note", annotations={"idempotentHint": True, "destructiveHint": True}),
        tool("append_log"),                                               # nothing: unclassified, asks
        tool("odd", effect="maybe", annotations={"readOnlyHint": True}),  # invalid: annotations ignored
    ])
    raw = http("raw", trusts_tool_annotations=False, default_tool_effect=Effect.IDEMPOTENT_WRITE)
    untrusted = FakeListing(raw, tools=[
        tool("list_notes", effect=R,
             annotations={"readOnlyHint": True, "destructiveHint": False, "openWorldHint": True}),
    ])
    catalog = Catalog([trusted, untrusted])

    routes = {r.name: r for r in await catalog.tools()}

    def summary(name: str) -> tuple[Effect, bool, bool]:
        c = routes[name].classification
        return c.effect, c.requires_approval, c.declared

    assert summary("pay__get_balance") == (Effect.READ, False, True)
    assert summary("pay__refund") == (Effect.NON_IDEMPOTENT_WRITE, True, True)
    assert summary("pay__set_memo") == (Effect.IDEMPOTENT_WRITE, True, True)
    assert summary("pay__list_notes") == (Effect.READ, False, False)
    assert summary("pay__put_note") == (Effect.IDEMPOTENT_WRITE, False, False)
    assert summary("pay__append_log") == (Effect.UNCLASSIFIED, True, False)
    assert summary("pay__odd") == (Effect.UNCLASSIFIED, True, False)
    assert summary("raw__list_notes") == (Effect.IDEMPOTENT_WRITE, False, False)  # its default, keys ignored

    # Published: the resolved key (none for unclassified), approval when it asks, and
    # annotations that agree (a declared read's contrary readOnlyHint is not passed on).
    assert published(routes["pay__get_balance"].definition) == (R, False, {"title": "Balance", "readOnlyHint": True})
    assert published(routes["pay__refund"].definition) == (NIW, True, {"readOnlyHint": False, "idempotentHint": False})
    assert published(routes["pay__set_memo"].definition) == (IW, True, {"readOnlyHint": False, "idempotentHint": True})
    assert published(routes["pay__put_note"].definition) == (
        IW, False, {"destructiveHint": True, "readOnlyHint": False, "idempotentHint": True})
    assert published(routes["pay__append_log"].definition) == (
        None, True, {"readOnlyHint": False, "idempotentHint": False})
    # Untrusted: no safety claim passes (destructiveHint: false), a cautious one does.
    assert published(routes["raw__list_notes"].definition) == (
        IW, False, {"openWorldHint": True, "readOnlyHint": False, "idempotentHint": True})

    # The upstream's call settings travel with each of its routes.
    settings = {(r.keyless_writes, r.scope_forwarded_keys, r.max_attempts) for r in routes.values() if r.upstream == "pay"}
    assert settings == {("pass", False, 2)}
    assert (routes["raw__list_notes"].keyless_writes, routes["raw__list_notes"].scope_forwarded_keys,
            routes["raw__list_notes"].max_attempts) == ("reject", True, 3)


async def test_definition_fields_and_foreign_meta_are_passed_on() -> None:
    icons = [{"src": "https://example.com/i.png"}]
    listed = tool("get_balance", effect=R, title="Balance", description="Balance of an account.",
                  outputSchema={"type": "object"}, icons=icons, _meta={"vendor/x": 1, APPROVAL_KEY: "recommended"})
    listed["inputSchema"] = {"type": "object", "properties": {"account": {"type": "string"}}}
    bare = {"name": "ping"}  # no inputSchema
    catalog = Catalog([FakeListing(stdio("pay"), tools=[listed, bare])])

    routes = {r.name: r for r in await catalog.tools()}

    definition = routes["pay__get_balance"].definition
    assert definition["title"] == "Balance" and definition["description"] == "Balance of an account."
    assert definition["inputSchema"] == {"type": "object", "properties": {"account": {"type": "string"}}}
    assert definition["outputSchema"] == {"type": "object"} and definition["icons"] == icons
    assert definition["_meta"] == {"vendor/x": 1, EFFECT_KEY: R, APPROVAL_KEY: "recommended"}
    assert routes["pay__ping"].definition["inputSchema"] == {"type": "object"}
    # The upstream's listing itself is never modified.
    assert listed["name"] == "get_balance"
    assert listed["_meta"] == {"vendor/x": 1, EFFECT_KEY: R, APPROVAL_KEY: "recommended"}


async def test_tool_policies_apply_by_exposed_name_and_by_upstream_name() -> None:
    cfg = stdio("pay", tool_policies={
        "pay__get_balance": {"effect": NIW},          # by exposed name: raises a declared read
        "send_payment": {"effect": R},                # by upstream name: cannot lower a declared write
        "append_log": {"effect": R},                  # by upstream name, undeclared: wins
        "pay__set_memo": {"requires_approval": True},
        "set_memo": {"requires_approval": False},     # the exposed-name entry is the one used
        "pay__delete_note": {"requires_approval": False},
    })
    catalog = Catalog([FakeListing(cfg, tools=[
        tool("get_balance", effect=R), tool("send_payment", effect=NIW), tool("append_log"),
        tool("set_memo", effect=IW), tool("delete_note"), tool("untouched"),
    ])])

    routes = {r.name: r for r in await catalog.tools()}

    def resolved(name: str) -> tuple[Effect, bool]:
        return routes[name].effect, routes[name].classification.requires_approval

    assert resolved("pay__get_balance") == (Effect.NON_IDEMPOTENT_WRITE, True)
    assert resolved("pay__send_payment") == (Effect.NON_IDEMPOTENT_WRITE, False)
    assert resolved("pay__append_log") == (Effect.READ, False)
    assert resolved("pay__set_memo") == (Effect.IDEMPOTENT_WRITE, True)
    assert resolved("pay__delete_note") == (Effect.UNCLASSIFIED, False)
    assert resolved("pay__untouched") == (Effect.UNCLASSIFIED, True)
    assert published(routes["pay__append_log"].definition) == (R, False, {"readOnlyHint": True})


# -- prompts, resources, templates --------------------------------------------------------------


def library() -> tuple[FakeListing, FakeListing]:
    pay = FakeListing(stdio("pay"),
                      prompts=[{"name": "dispute_letter", "description": "d", "arguments": [{"name": "payment_id"}]}],
                      resources=[{"uri": "payments://policy", "name": "policy", "mimeType": "text/plain"},
                                 {"uri": "shared://readme", "name": "readme"}],
                      templates=[{"uriTemplate": "payments://accounts/{account}", "name": "account"},
                                 {"uriTemplate": "notes://{folder}/{note}", "name": "any_note"}])
    notes = FakeListing(http("notes", prefix=""),
                        prompts=[{"name": "summary"}, {"name": "pay__dispute_letter"}],
                        resources=[{"uri": "shared://readme", "name": "notes_readme"},
                                   {"uri": "notes://inbox/today", "name": "today"},
                                   {"uri": "notes://later", "name": "later"}],
                        templates=[{"uriTemplate": "notes://{folder}", "name": "folder"}])
    return pay, notes


async def test_prompts_are_prefixed_and_route_to_their_upstream() -> None:
    catalog = Catalog(library())

    prompts = {p.name: p for p in await catalog.prompts()}

    assert list(prompts) == ["pay__dispute_letter", "summary"]  # notes' same-named prompt: the first wins
    letter = prompts["pay__dispute_letter"]
    assert (letter.upstream, letter.target) == ("pay", "dispute_letter")
    assert letter.definition == {
        "name": "pay__dispute_letter", "description": "d", "arguments": [{"name": "payment_id"}]}
    assert (prompts["summary"].upstream, prompts["summary"].target) == ("notes", "summary")
    assert await catalog.prompt("pay__dispute_letter") is letter
    assert await catalog.prompt("dispute_letter") is None


async def test_resources_keep_their_uri_and_get_a_prefixed_name() -> None:
    catalog = Catalog(library())

    resources = {r.definition["uri"]: r for r in await catalog.resources()}

    # notes://inbox/today is pay's (its template notes://{folder}/{note} comes first): not listed.
    assert list(resources) == ["payments://policy", "shared://readme", "notes://later"]
    assert resources["payments://policy"].definition == {
        "uri": "payments://policy", "name": "pay__policy", "mimeType": "text/plain"}
    assert resources["shared://readme"].upstream == "pay"  # the same URI from two upstreams: the first wins
    assert resources["notes://later"].definition["name"] == "later"  # prefix ""
    templates = await catalog.resource_templates()
    assert [(t.definition["name"], t.upstream) for t in templates] == [
        ("pay__account", "pay"), ("pay__any_note", "pay"), ("folder", "notes")]
    assert templates[0].definition["uriTemplate"] == "payments://accounts/{account}"


@pytest.mark.parametrize(("uri", "upstream"), [
    ("payments://policy", "pay"),              # listed
    ("payments://accounts/main", "pay"),       # a template's expansion
    ("notes://inbox/today", "pay"),            # listed by notes, but pay's notes://{folder}/{note}, first in order, matches
    ("notes://archive/old", "pay"),            # pay's template, first in order
    ("notes://archive", "notes"),              # only notes' template
    ("payments://accounts/", None),            # an expression expands to at least one character
    ("payments://accounts/main/x", "pay"),     # an expansion may hold a slash
    ("other://x", None),
])
async def test_resource_upstream_is_the_first_upstream_in_config_order_serving_the_uri(uri: str, upstream: str | None) -> None:
    assert await Catalog(library()).resource_upstream(uri) == upstream


# -- rebuilding, on_change, and what `tool` waits for ------------------------------------------


async def test_routes_are_rebuilt_only_when_a_version_changes() -> None:
    pay = FakeListing(stdio("pay"), tools=[tool("get_balance", description="v1")])
    crm = FakeConnectors(FakeConnectorTool("crm_tag"))
    catalog = Catalog([pay], connectors=crm)
    first = {r.name: r for r in await catalog.tools()}

    # The listing changes under the same version: the routes are not rebuilt.
    pay.listings[ListKind.TOOLS] = [tool("get_balance", description="v2")]
    again = {r.name: r for r in await catalog.tools()}
    assert again["pay__get_balance"] is first["pay__get_balance"]
    assert again["pay__get_balance"].definition["description"] == "v1"

    # A new version of the listing: rebuilt.
    pay.version += 1
    assert {r.name: r.definition.get("description") for r in await catalog.tools()} == {
        "pay__get_balance": "v2", "crm_tag": "A reviewed operation."}

    # A new connector set (connector version): rebuilt too.
    crm.replace(FakeConnectorTool("crm_tag"), FakeConnectorTool("crm_refund", Effect.NON_IDEMPOTENT_WRITE))
    assert [r.name for r in await catalog.tools()] == ["pay__get_balance", "crm_tag", "crm_refund"]


async def test_on_change_only_when_the_set_of_tool_names_changes() -> None:
    changes: list[str] = []
    pay = FakeListing(stdio("pay"))
    notes = FakeListing(stdio("notes"))
    crm = FakeConnectors()
    catalog = Catalog([pay, notes], connectors=crm, on_change=lambda: changes.append("changed"))

    # The first build (here on the first listing's arrival, through the cache's update
    # callback) is no change: nobody was told of an earlier set.
    pay.publish(ListKind.TOOLS, [tool("get_balance")])
    assert [r.name for r in await catalog.tools()] == ["pay__get_balance"]
    assert changes == []

    pay.publish(ListKind.TOOLS, [tool("get_balance", description="reworded")])  # same names
    pay.publish(ListKind.PROMPTS, [{"name": "letter"}])                          # not a tool
    assert changes == []

    notes.publish(ListKind.TOOLS, [tool("put_note")])  # the update callback rebuilds at once
    assert changes == ["changed"]
    assert [r.name for r in await catalog.tools()] == ["pay__get_balance", "notes__put_note"]

    crm.replace(FakeConnectorTool("crm_tag"))  # noticed at the next refresh
    assert changes == ["changed"]
    catalog.refresh_routes()
    assert changes == ["changed"] * 2
    pay.publish(ListKind.TOOLS, [])
    assert changes == ["changed"] * 3
    assert [r.name for r in await catalog.tools()] == ["notes__put_note", "crm_tag"]
    assert changes == ["changed"] * 3


async def test_tool_waits_for_listings_only_for_an_unknown_name() -> None:
    pay = FakeListing(stdio("pay"), tools=[tool("get_balance")])
    late = FakeListing(stdio("late"))
    late.on_get[ListKind.TOOLS] = [tool("put_note")]  # listed when first awaited
    catalog = Catalog([pay, late])

    known = await catalog.tool("pay__get_balance")
    assert known is not None and known.target == "get_balance"
    assert pay.gets == late.gets == Counter()  # known: one lookup, no listing awaited

    found = await catalog.tool("late__put_note")
    assert found is not None and (found.upstream, found.target) == ("late", "put_note")
    assert pay.gets == late.gets == Counter({ListKind.TOOLS: 1})

    assert await catalog.tool("pay__nope") is None
    assert pay.gets == late.gets == Counter({ListKind.TOOLS: 2})
    assert await catalog.tool("late__put_note") is found
    assert pay.gets[ListKind.TOOLS] == late.gets[ListKind.TOOLS] == 2


async def test_a_resource_shadowed_by_an_earlier_template_is_warned_about_naming_both(
        caplog: pytest.LogCaptureFixture) -> None:
    await Catalog(library()).resources()
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "resource 'notes://inbox/today' of upstream notes is also served by upstream pay (template " \
           "'notes://{folder}/{note}'), which comes first; left out" in warned
