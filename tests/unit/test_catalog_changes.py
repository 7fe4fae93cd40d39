"""The catalog tells clients which lists changed (issue 13: list changes reach every client), and
keeps the first upstream's prompt, resource or template on a collision, warning once."""

from __future__ import annotations

import logging

import pytest

from gateway.pipeline.catalog import Catalog
from gateway.upstreams.listing import ListKind
from tests.unit.test_catalog import FakeListing, stdio, tool

pytestmark = pytest.mark.anyio


async def test_the_kinds_whose_published_definitions_changed_are_reported() -> None:
    pay = FakeListing(stdio("pay"), tools=[tool("refund")], prompts=[], resources=[], templates=[])
    changes: list[frozenset[str]] = []
    catalog = Catalog([pay], on_lists_changed=changes.append)
    await catalog.tools()  # the first build tells nobody
    pay.publish(ListKind.TOOLS, [tool("refund", description="now with a description")])
    catalog.refresh_routes()
    pay.publish(ListKind.PROMPTS, [{"name": "letter"}])
    catalog.refresh_routes()
    pay.publish(ListKind.RESOURCE_TEMPLATES, [{"uriTemplate": "pay://{id}", "name": "payment"}])
    catalog.refresh_routes()
    pay.publish(ListKind.RESOURCES, [])  # a fetch that changed nothing clients see
    catalog.refresh_routes()
    assert changes == [frozenset({"tools"}), frozenset({"prompts"}), frozenset({"resources"})]


async def test_prompt_resource_and_template_collisions_keep_the_first_upstream_and_warn_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def listing(name: str) -> FakeListing:
        return FakeListing(stdio(name, prefix=""), tools=[], prompts=[{"name": "letter", "description": name}],
                           resources=[{"uri": "docs://a", "name": "a", "description": name}],
                           templates=[{"uriTemplate": "docs://{id}", "name": "doc", "description": name}])

    first, second = listing("first"), listing("second")
    with caplog.at_level(logging.WARNING, logger="gateway.pipeline.catalog"):
        catalog = Catalog([first, second])
        for _ in range(2):  # rebuilt twice: warned once
            assert [(p.name, p.upstream) for p in await catalog.prompts()] == [("letter", "first")]
            assert [r.upstream for r in await catalog.resources()] == ["first"]
            assert [t.upstream for t in await catalog.resource_templates()] == ["first"]
            second.publish(ListKind.TOOLS, [tool("other")])
    warnings = sorted(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert warnings == [
        "prompt 'letter' of upstream second is also served by upstream first, which comes first; left out",
        "resource 'docs://a' of upstream second is also served by upstream first, which comes first; left out",
        "resource template 'docs://{id}' of upstream second is also served by upstream first, which comes first; left out",
    ]
