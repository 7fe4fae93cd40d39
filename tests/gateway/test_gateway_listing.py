"""tools/list through a real gateway: the published Dex `_meta`, agreeing annotations, policies,
untrusted upstreams, `prefix: ""`, name collisions, and an upstream that pages its tools/list."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from mcp_types import Tool

from tests.gateway.helpers import APPROVAL, EFFECT, all_tools, connect, text_of, tools_by_name
from tests.support.gateway import (
    RunningGateway,
    http_upstream,
    run_gateway_cli,
    start_gateway,
    stdio_upstream,
    write_config,
)
from tests.support.resource_server import SCRIPT_PATH as RESOURCE_SERVER
from tests.support.servers import REPO_ROOT, RunningServer, count_executions, read_executions, start_http_server

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

R, IW, NIW, UNCLASSIFIED = "read", "idempotent_write", "non_idempotent_write", "unclassified"

# dex_server's declared effects, and which tools declare approval: recommended.
DEX_EFFECTS = {
    "get_balance": R, "list_payments": R, "set_memo": IW, "refund": NIW, "send_payment": NIW,
    "close_account": NIW, "settle_uncertain": NIW, "long_report": R, "sleep": R, "statement": R, "hold_payment": NIW,
    "hold_memo": IW, "crash_read": R, "crash_memo": IW, "crash_payment": NIW,
}
DEX_APPROVAL = {"refund", "close_account"}
NOTES_TOOLS = ["list_notes", "read_note", "put_note", "delete_note", "append_log"]


@dataclass
class Setup:
    gateway: RunningGateway
    main: RunningServer
    main_state: Path
    shadow_state: Path
    config: Path


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("listing")
    main_state, pay_state, notes_state, shadow_state = (root / n for n in ("main", "pay", "notes", "shadow"))
    for d in (pay_state, notes_state, shadow_state):
        d.mkdir()
    with start_http_server("dex_server", state_dir=main_state, args=["--page-size", "2"]) as main:
        config = write_config(root, {"upstreams": [
            # Unprefixed, and paged two tools at a time.
            http_upstream("main", main.url, prefix=""),
            stdio_upstream("pay", "dex_server", state_dir=pay_state, tool_policies={
                "pay__get_balance": {"effect": NIW},        # raises a declared read
                "pay__send_payment": {"effect": R},         # may not lower a declared write
                "pay__set_memo": {"requires_approval": True},
            }),
            stdio_upstream("notes", "plain_server", state_dir=notes_state, tool_policies={
                "notes__append_log": {"effect": R},
                "notes__delete_note": {"requires_approval": False},
            }),
            stdio_upstream("raw", "plain_server", state_dir=notes_state, trusts_tool_annotations=False),
            # Same unprefixed names as `main`: every tool collides and the first upstream wins.
            stdio_upstream("shadow", "dex_server", state_dir=shadow_state, prefix=""),
        ]})
        with start_gateway(config) as gateway:
            yield Setup(gateway, main, main_state, shadow_state, config)


def annotation_effect(tool: Tool) -> str:
    """How a client that knows only the MCP annotations classifies the tool."""
    a = tool.annotations
    assert a is not None, f"{tool.name} has no annotations"
    if a.read_only_hint is True:
        return R
    if a.idempotent_hint is True:
        return IW
    return "write"  # non-idempotent or unclassified: both are "a write that may not be repeated"


def published(tool: Tool) -> tuple[str, bool]:
    meta = tool.meta or {}
    effect = meta.get(EFFECT, UNCLASSIFIED)
    if APPROVAL in meta:
        assert meta[APPROVAL] == "recommended", tool.name
    return effect, APPROVAL in meta


def expected() -> dict[str, tuple[str, bool]]:
    want: dict[str, tuple[str, bool]] = {}
    for name, effect in DEX_EFFECTS.items():
        want[name] = (effect, name in DEX_APPROVAL)                      # main, prefix ""
        want[f"pay__{name}"] = (effect, name in DEX_APPROVAL)
    want["pay__get_balance"] = (NIW, True)          # declared read + policy NIW: raised, and it asks
    want["pay__send_payment"] = (NIW, False)        # policy read cannot lower it; read asks nothing
    want["pay__set_memo"] = (IW, True)              # requires_approval wins
    want.update({
        "notes__list_notes": (R, False),
        "notes__read_note": (R, False),
        "notes__put_note": (IW, False),             # idempotentHint, whatever destructiveHint says
        "notes__delete_note": (UNCLASSIFIED, False),  # policy requires_approval: false wins
        "notes__append_log": (R, False),            # no annotations + policy read
    })
    for name in NOTES_TOOLS:                        # trusts_tool_annotations: false
        want[f"raw__{name}"] = (UNCLASSIFIED, True)
    return want


async def test_every_tool_published_with_resolved_meta_and_agreeing_annotations(setup: Setup, era: str) -> None:
    async with connect(setup.gateway.url, era) as client:
        tools = tools_by_name(await all_tools(client))
    want = expected()
    assert sorted(tools) == sorted(want)
    for name, (effect, approval) in want.items():
        tool = tools[name]
        assert published(tool) == (effect, approval), name
        assert annotation_effect(tool) == (effect if effect in (R, IW) else "write"), name
        if effect == UNCLASSIFIED:
            assert EFFECT not in (tool.meta or {}), name


async def test_untrusted_upstream_never_passes_a_safety_hint(setup: Setup, era: str) -> None:
    async with connect(setup.gateway.url, era) as client:
        tools = tools_by_name(await all_tools(client))
    # plain_server says list_notes is read-only; the gateway does not trust it.
    assert tools["raw__list_notes"].annotations.read_only_hint is False
    assert tools["notes__list_notes"].annotations.read_only_hint is True
    # A cautious hint (plain_server's destructiveHint: true on delete_note) passes from an
    # untrusted upstream.
    assert tools["raw__delete_note"].annotations.destructive_hint is True


async def test_definitions_passed_on(setup: Setup, era: str) -> None:
    async with connect(setup.gateway.url, era) as client:
        tools = tools_by_name(await all_tools(client))
    for name in ("get_balance", "pay__get_balance"):
        tool = tools[name]
        assert tool.description == "Balance of an account."
        assert tool.input_schema.get("properties", {}).get("account") == {"type": "string"}
        assert tool.input_schema.get("required") == ["account"]
    assert tools["notes__read_note"].input_schema.get("required") == ["name"]
    assert tools["notes__read_note"].description == "The text of a note."



async def test_paged_upstream_fully_listed_and_unprefixed(setup: Setup) -> None:
    """`main` pages its 14 tools two at a time; all 14 appear, under their own names."""
    async with connect(setup.gateway.url, "legacy") as client:
        tools = tools_by_name(await all_tools(client))
    assert set(DEX_EFFECTS) <= set(tools)
    assert not any(name.startswith(("main__", "shadow__")) for name in tools)
    # They are main's, every page of them: each of shadow's 14 same-named tools was left out
    # because main, listed first, already had it (a page lost would let shadow's through).
    for name in DEX_EFFECTS:
        setup.gateway.wait_for_log(rf"tool '{name}' of upstream shadow collides with an earlier tool")


async def test_collision_first_upstream_wins(setup: Setup, era: str) -> None:
    async with connect(setup.gateway.url, era) as client:
        result = await client.call_tool("get_balance", {"account": f"collide-{era}"})
    assert result.is_error is False, text_of(result)
    args = [r["arguments"] for r in read_executions(setup.main_state, tool="get_balance")]
    assert {"account": f"collide-{era}"} in args
    assert count_executions(setup.shadow_state, tool="get_balance") == 0
    setup.gateway.wait_for_log(r"WARNING .*tool 'get_balance' of upstream shadow collides with an earlier tool "
                               r"of the same exposed name; left out")


def test_tools_cli_json(setup: Setup) -> None:
    """`dex-gateway tools --config ... --json` lists the same tools with effect and approval."""
    done = run_gateway_cli("tools", "--config", str(setup.config), "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    by_name = {row["name"]: row for row in rows}
    want = expected()
    assert sorted(by_name) == sorted(want)
    for name, (effect, approval) in want.items():
        assert by_name[name]["effect"] == effect, name
        assert by_name[name]["approval"] == ("recommended" if approval else ""), name
    assert "Traceback" not in done.stderr


# -- resources: config order owns a URI --------------------------------------------------------


def resource_upstream(name: str, *, resources: tuple[str, ...] = (), templates: tuple[str, ...] = ()) -> dict:
    """tests/support/resource_server.py as a stdio upstream; its reads answer `<name> served <uri>`."""
    args = [str(RESOURCE_SERVER), "--transport", "stdio", "--label", name]
    args += [a for uri in resources for a in ("--resource", uri)]
    args += [a for t in templates for a in ("--template", t)]
    return {"name": name, "transport": "stdio", "command": sys.executable, "args": args, "cwd": str(REPO_ROOT)}


@pytest.fixture(scope="module")
def resource_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    root = tmp_path_factory.mktemp("resource-order")
    config = write_config(root, {"upstreams": [
        resource_upstream("first", templates=("notes://{id}",)),
        # notes://7 is also first's (by its template, which comes first); other://1 is second's.
        resource_upstream("second", resources=("notes://7", "other://1")),
        resource_upstream("third", templates=("other://{x}",)),
    ]})
    with start_gateway(config) as gateway:
        yield gateway


async def test_the_first_upstream_in_config_order_owns_a_uri(resource_gateway: RunningGateway, era: str) -> None:
    """An earlier upstream's template beats a later upstream's concrete resource (and an earlier
    concrete resource beats a later template): reads go to the first upstream that serves the URI."""
    async with connect(resource_gateway.url, era) as client:
        listed = [str(r.uri) for r in (await client.list_resources()).resources]
        served = {uri: (await client.read_resource(uri)).contents[0].text
                  for uri in ("notes://7", "notes://8", "other://1", "other://2")}
    assert served == {
        "notes://7": "first served notes://7",
        "notes://8": "first served notes://8",
        "other://1": "second served other://1",
        "other://2": "third served other://2",
    }
    # A listed URI is one whose reads go to the upstream that listed it.
    assert listed == ["other://1"]
    resource_gateway.wait_for_log(r"WARNING .*resource 'notes://7' of upstream second is also served by upstream first "
                                  r"\(template 'notes://\{id\}'\), which comes first; left out")
