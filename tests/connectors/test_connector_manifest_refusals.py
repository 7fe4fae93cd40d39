"""Every refusal rule of SPEC 7 (and the manifest format), driven by the conventions fixtures."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from gateway.connectors import ManifestError, parse_manifest
from gateway.conventions.fixtures import cases

CASES = cases("manifest_refusals")


@pytest.mark.parametrize("fmt", ["yaml", "json"])
@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_refused(case: dict[str, Any], fmt: str) -> None:
    doc = case["input"]["manifest"]
    filename = "connectors/billing/connector.yaml" if fmt == "yaml" else "pkg/dex-connector.json"
    text = yaml.safe_dump(doc, sort_keys=False) if fmt == "yaml" else json.dumps(doc, indent=2)
    with pytest.raises(ManifestError) as caught:
        parse_manifest(text, filename)
    exc, expect = caught.value, case["expect"]
    assert (exc.operation, exc.key) == (expect["operation"], expect["key"])
    assert expect["message_contains"] in str(exc)
    message = str(exc)
    assert message.startswith(filename)
    assert repr(expect["key"]) in message
    if expect["operation"] is not None:
        assert repr(expect["operation"]) in message
    assert exc.line is not None, "the error gives the line of the key"


def test_yaml_line_points_at_the_key() -> None:
    text = """apiVersion: connectors.dex.dev/v1alpha1
kind: Connector
metadata: {name: billing}
spec:
  operations:
    - name: getInvoice
      kind: query
      branches: [{id: found}]
      inputSchema: {type: object}
      agent:
        exposed: true
        approve: recommended
"""
    with pytest.raises(ManifestError) as caught:
        parse_manifest(text, "billing.yaml")
    assert caught.value.line == 12
    assert str(caught.value).startswith("billing.yaml:12: operation 'getInvoice': key 'agent.approve': unknown agent key")


def test_not_yaml() -> None:
    with pytest.raises(ManifestError, match=r"^x.yaml:2: not valid YAML"):
        parse_manifest("a: [1,\nb: }", "x.yaml")
