"""Real manifests: the published ones load and expose nothing; the examples expose what their
reviewer blocks say; the validate command explains what a reviewer adds."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest
from connector_support import PUBLISHED, REPO_ROOT, load_doc, manifest_doc

from gateway.connectors import ConnectorRegistry, load_manifest, validate_cli
from gateway.connectors.call_id import CALL_ID_NAMESPACE, derive_call_id, length_prefixed
from gateway.conventions.keys import Effect

PUBLISHED_FILES = sorted(PUBLISHED.glob("*/connector.yaml"))


@pytest.mark.parametrize("path", PUBLISHED_FILES, ids=lambda p: p.parent.name)
def test_published_manifests_load_and_expose_nothing(path: Path) -> None:
    manifest = load_manifest(path)
    assert manifest.connector_id == path.parent.name
    assert len(manifest.operations) == 4
    assert manifest.exposed_operations == ()


def test_branch_flags() -> None:
    hubspot = load_manifest(PUBLISHED / "hubspot/connector.yaml")
    upsert = hubspot.operation("upsertObject")
    assert upsert.optional_flags and upsert.success_branches == {"upserted"}
    assert upsert.optional_branches == {"conflict", "providerRejected", "invalidResponse", "defect"}
    # No optional flags anywhere: the first branch is the success branch, the rest optional.
    slack = load_manifest(PUBLISHED / "slack/connector.yaml")
    post = slack.operation("postChannelMessage")
    assert not post.optional_flags and post.success_branches == {"sent"}
    assert post.optional_branches == {"providerRejected", "uncertain", "defect"}


def test_flags_with_several_required_branches() -> None:
    m = load_doc(manifest_doc({"name": "upsert", "kind": "mutation",
                               "branches": [{"id": "created"}, {"id": "updated"}, {"id": "defect"}, {"id": "gone", "optional": True}]}))
    # defect is never a success branch, even when not marked optional.
    assert m.operations[0].success_branches == {"created", "updated"}


@pytest.mark.anyio
async def test_registry_loads_published_dir_with_no_tools() -> None:
    registry = ConnectorRegistry("memory://")
    await registry.open()
    try:
        regs = await registry.load_dir(PUBLISHED)
        assert sorted(r.connector_id for r in regs) == ["hubspot", "slack"]
        assert registry.tools() == []
        assert all(len(r.not_exposed) == 4 for r in regs)
    finally:
        await registry.close()


def test_examples_match_config_dir() -> None:
    for name in ("billing", "tickets"):
        for file in ("connector.yaml", "binding.yaml"):
            assert (REPO_ROOT / "config/connectors" / name / file).read_text() == (REPO_ROOT / "examples/connectors" / name / file).read_text()


def test_example_effects() -> None:
    billing = load_manifest(REPO_ROOT / "examples/connectors/billing/connector.yaml")
    got = {billing.tool_name(op): (op.effect, op.requires_approval, op.max_attempts) for op in billing.exposed_operations}
    assert got == {
        "billing_get_invoice": (Effect.READ, False, 3),
        "billing_set_invoice_memo": (Effect.IDEMPOTENT_WRITE, False, 3),
        "billing_create_refund": (Effect.NON_IDEMPOTENT_WRITE, True, 1),
    }
    tickets = load_manifest(REPO_ROOT / "examples/connectors/tickets/connector.yaml")
    assert [tickets.tool_name(op) for op in tickets.exposed_operations] == ["tickets_list_ticket_ids", "tickets_close_ticket"]


def test_json_manifest_equals_yaml(tmp_path: Path) -> None:
    import json

    import yaml

    data = yaml.safe_load((REPO_ROOT / "examples/connectors/billing/connector.yaml").read_text())
    (tmp_path / "dex-connector.json").write_text(json.dumps(data))
    skip = {"file": True, "operations": {"__all__": {"line"}}}
    assert load_manifest(tmp_path / "dex-connector.json").model_dump(exclude=skip) == \
        load_manifest(REPO_ROOT / "examples/connectors/billing/connector.yaml").model_dump(exclude=skip)


def test_call_id_is_stable_and_length_prefixed() -> None:
    a = derive_call_id("fence-1", "billing", "createRefund")
    assert a == derive_call_id("fence-1", "billing", "createRefund")
    assert a.version == 5
    assert derive_call_id("a/b", "c", "d") != derive_call_id("a", "b/c", "d")
    assert length_prefixed("ab", "") == b"\x00\x00\x00\x02ab\x00\x00\x00\x00"
    import hashlib
    import uuid

    digest = hashlib.sha1(CALL_ID_NAMESPACE.bytes + length_prefixed("fence-1", "billing", "createRefund")).digest()
    assert a == uuid.UUID(bytes=digest[:16], version=5)
    assert CALL_ID_NAMESPACE == uuid.uuid5(uuid.NAMESPACE_URL, "https://superdurable.dev/dex-connectors/call-id/v1")
    if hasattr(uuid, "uuid5"):
        try:
            assert a == uuid.uuid5(CALL_ID_NAMESPACE, length_prefixed("fence-1", "billing", "createRefund"))  # type: ignore[arg-type]
        except TypeError:
            pass  # Python < 3.12 takes only str names


def _validate(*paths: str | Path) -> tuple[int, str]:
    parser = argparse.ArgumentParser()
    validate_cli.configure_parser(parser)
    out = io.StringIO()
    code = validate_cli.run(parser.parse_args([str(p) for p in paths]), out)
    return code, out.getvalue()


def test_validate_explains_what_a_reviewer_adds() -> None:
    code, out = _validate(PUBLISHED / "hubspot/connector.yaml", PUBLISHED / "slack")
    assert code == 0
    assert out.count("no agent block, so it is not exposed") == 8
    assert "upsertObject (mutation)" in out and "retry: safe" in out
    assert "optional branches: conflict, providerRejected, invalidResponse, defect" in out
    assert "inputSchema:" in out and "exposed: true" in out
    assert "first branch is the success branch" in out  # slack: no optional flags
    assert out.rstrip().endswith("2 valid, 0 refused")


def test_validate_config_dir_lists_tools() -> None:
    code, out = _validate(REPO_ROOT / "config/connectors")
    assert code == 0
    assert "billing_create_refund  (createRefund, non_idempotent_write, 1 attempt)  approval: recommended" in out
    assert "voidInvoice (mutation): no agent block" in out


def test_validate_refuses(tmp_path: Path) -> None:
    bad = tmp_path / "connector.yaml"
    bad.write_text((REPO_ROOT / "examples/connectors/billing/connector.yaml").read_text().replace("retry: safe", "retry: always"))
    code, out = _validate(bad, PUBLISHED / "slack/connector.yaml")
    assert code == 1
    assert f"ERROR {bad}:" in out and "operation 'setInvoiceMemo': key 'agent.retry': unknown agent value 'always'" in out
    assert out.rstrip().endswith("1 valid, 1 refused")
    assert _validate(tmp_path / "missing.yaml")[0] == 1
