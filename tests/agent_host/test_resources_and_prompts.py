"""The model reads a resource and a prompt of @modelcontextprotocol/server-everything through the
gateway with the three mcp_* built-in tools (real gateway, real server-everything, `dex-agent run`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_host.domain import texts
from agent_host.turn.builtins import resource_tool_specs
from tests.agent_host.host_support import run_agent
from tests.support.everything import everything_stdio, require_everything
from tests.support.gateway import start_gateway, write_config

pytestmark = pytest.mark.timeout(120)


def test_the_model_reads_a_resource_and_a_prompt(tmp_path: Path) -> None:
    node = require_everything()
    config = write_config(tmp_path, {"upstreams": [everything_stdio(node=node)]})
    with start_gateway(config) as gateway:
        gateway.wait_for_log("catalog ready", timeout=30)
        done = run_agent("run", "--gateway", gateway.url, "--store", str(tmp_path / "s.db"), "--yes",
                         "--model", "scripted:tests.agent_host.question_scripts:read_resource_and_prompt", "read")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "LISTED" in out and "RESULTS" in out, out
    results = out.split("RESULTS ", 1)[1]
    read, prompt, elsewhere = results.split(" || ")
    assert read.startswith('mcp_read_resource={"contents": [{'), read
    assert '"uri": ' in read and '"mimeType": ' in read
    assert prompt.startswith('mcp_get_prompt={"description": '), prompt
    assert '"messages": [{"content": {' in prompt and '"role": "user"' in prompt
    assert elsewhere.startswith("mcp_read_resource=The tool call was not run: invalid mcp_read_resource arguments: 'elsewhere' is not one of ['gateway']")


def test_the_resource_tools_take_the_server_as_an_enum_and_answer_sorted_json() -> None:
    specs = resource_tool_specs(["gateway"])
    assert sorted(specs) == ["mcp_get_prompt", "mcp_list_resources_and_prompts", "mcp_read_resource"]
    for spec in specs.values():
        assert spec.input_schema["properties"]["server"]["enum"] == ["gateway"]
    assert texts.sorted_json({"b": 1.0, "a": [{"z": 2, "priority": 1.0}]}) == '{"a": [{"priority": 1, "z": 2}], "b": 1}'
    assert json.loads(texts.sorted_json({"x": 0.5})) == {"x": 0.5}
