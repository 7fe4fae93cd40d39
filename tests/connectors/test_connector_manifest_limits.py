"""Manifests are read within limits: duplicates, alias bombs, depth and size are refused with the
file and line; the parse runs off the event loop within a time budget; a hostile registration
already in the database is left out instead of freezing the replica that reads it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import anyio
import pytest
import yaml
from connector_support import REPO_ROOT, manifest_doc

from gateway.connectors import ConnectorRegistry, ManifestError, parse_manifest
from gateway.connectors.manifest import parse_manifest_off_loop
from gateway.connectors.storage import SqliteRegistrationStore, StoredRegistration, now_iso
from gateway.config.yaml_source import DEFAULT_LIMITS, SourceLimits
from tests.support.hostile import ALIAS_BOMB


def operation(name: str) -> dict[str, object]:
    return {"name": name, "kind": "query", "description": "Looks something up.", "branches": [{"id": "found"}]}


def test_duplicate_keys_are_refused_in_yaml_manifests() -> None:
    text = yaml.safe_dump(manifest_doc(operation("getInvoice")), sort_keys=False)
    text = text.replace("    kind: query\n", "    kind: query\n    kind: mutation\n", 1)
    line = text.splitlines().index("    kind: mutation") + 1
    with pytest.raises(ManifestError) as caught:
        parse_manifest(text, "billing/connector.yaml")
    assert caught.value.line == line
    assert str(caught.value) == f"billing/connector.yaml:{line}: duplicate key 'spec.operations.0.kind'"


def test_duplicate_keys_are_refused_in_json_manifests() -> None:
    text = json.dumps(manifest_doc(operation("getInvoice")), indent=2)
    text = text.replace('"kind": "query",', '"kind": "query",\n        "kind": "mutation",', 1)
    line = text.splitlines().index('        "kind": "mutation",') + 1
    with pytest.raises(ManifestError) as caught:
        parse_manifest(text, "pkg/dex-connector.json")
    assert str(caught.value) == f"pkg/dex-connector.json:{line}: duplicate key 'spec.operations.0.kind'"


def test_the_alias_bomb_is_refused_fast() -> None:
    started = time.perf_counter()
    with pytest.raises(ManifestError) as caught:
        parse_manifest(ALIAS_BOMB, "connector.yaml")
    assert time.perf_counter() - started < 0.5
    assert str(caught.value) == f"connector.yaml:6: more than {DEFAULT_LIMITS.max_nodes} values (aliases expanded)"


def test_deep_and_large_manifests_are_refused() -> None:
    deep = {"apiVersion": "connectors.dex.dev/v1alpha1", "x": {}}
    inner = deep["x"]
    for _ in range(70):
        inner["x"] = {}
        inner = inner["x"]
    with pytest.raises(ManifestError, match=r"^connector.yaml:\d+: nested deeper than 64 levels"):
        parse_manifest(yaml.safe_dump(deep), "connector.yaml")
    with pytest.raises(ManifestError, match=r"^dex-connector.json:\d+: nested deeper than 64 levels"):
        parse_manifest(json.dumps(deep), "dex-connector.json")
    big = json.dumps({**manifest_doc(operation("a")), "pad": "x" * DEFAULT_LIMITS.max_bytes})
    with pytest.raises(ManifestError, match="over the size limit of 1048576 bytes"):
        parse_manifest(big, "dex-connector.json")


def test_the_published_manifests_with_anchors_still_load() -> None:
    # hubspot shares one `execution` block by anchor; every operation gets it.
    text = (REPO_ROOT.parent / "shared/data/dex-connectors/hubspot/connector.yaml").read_text()
    manifest = parse_manifest(text, "hubspot/connector.yaml")
    assert len({op.execution for op in manifest.operations}) == 1


def big_manifest() -> str:
    """A valid manifest near the limits: reading it takes a noticeable while."""
    doc = manifest_doc(*(operation(f"op{n}") for n in range(2_500)))
    text = yaml.safe_dump(doc, sort_keys=False, width=10_000)
    assert len(text) < DEFAULT_LIMITS.max_bytes
    return text


@pytest.mark.anyio
async def test_the_parse_runs_off_the_event_loop() -> None:
    text = big_manifest()
    ticks = 0
    stalls: list[float] = []

    async def ticker() -> None:
        nonlocal ticks
        while True:
            before = time.perf_counter()
            await anyio.sleep(0.01)
            stalls.append(time.perf_counter() - before)
            ticks += 1

    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        started = time.perf_counter()
        manifest = await parse_manifest_off_loop(text, "big.yaml")
        took = time.perf_counter() - started
        tg.cancel_scope.cancel()
    assert len(manifest.operations) == 2_500
    assert took > 0.2 and ticks > took / 0.1, (took, ticks)
    assert max(stalls) < 0.5, f"the event loop stalled {max(stalls):.2f} s while the manifest was read"


@pytest.mark.anyio
async def test_the_time_budget_refuses_a_slow_parse() -> None:
    text = big_manifest()
    started = time.perf_counter()
    with pytest.raises(ManifestError, match=r"^big.yaml:\d+: reading took longer than the time budget of 0.05 s"):
        await parse_manifest_off_loop(text, "big.yaml", SourceLimits(time_budget_seconds=0.05))
    assert time.perf_counter() - started < 1


@pytest.mark.anyio
async def test_a_hostile_stored_registration_is_left_out(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """What another replica (or an older gateway) stored is re-read within the limits: the bomb is
    left out with a warning, the rest is served, and opening takes no time."""
    url = f"sqlite:///{tmp_path}/gateway.db"
    store = SqliteRegistrationStore.from_url(url)
    await store.open()
    now = now_iso()
    await store.put(StoredRegistration(connector_id="bomb", filename="connector.yaml", manifest=ALIAS_BOMB,
                                       binding=None, created_at=now, updated_at=now))
    plain = yaml.safe_dump(manifest_doc(operation("getInvoice"), name="plain"), sort_keys=False)
    await store.put(StoredRegistration(connector_id="plain", filename="plain.yaml", manifest=plain,
                                       binding=None, created_at=now, updated_at=now))
    await store.close()
    started = time.perf_counter()
    async with ConnectorRegistry(url) as registry:
        assert time.perf_counter() - started < 2
        assert [r.connector_id for r in await registry.list()] == ["plain"]
    assert "connector registration bomb is left out here" in caplog.text
    assert "aliases expanded" in caplog.text
