"""Snapshot real tool definitions into bench/tool_search/real_tools.json (run by hand, once).

Sources: @modelcontextprotocol/server-everything (npm; pass --everything PATH/TO/dist/index.js),
mcp-server-time (pip; pass --time-python PATH/TO/python), the example servers in examples/servers,
and the connector manifests in examples/connectors and any folder given with --connectors.

    .venv/bin/python bench/tool_search/snapshot.py --everything conformance/node_modules/@modelcontextprotocol/server-everything/dist/index.js \
        --time-python .venv-tools/bin/python --connectors /work/shared/data/dex-connectors
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
import yaml
from mcp import Client, StdioServerParameters

from gateway.connectors.manifest import load_manifest

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).with_name("real_tools.json")


async def _list(source: str, params: StdioServerParameters) -> list[dict[str, Any]]:
    async with Client(params, mode="legacy", cache=None) as client:
        result = await client.list_tools()
    tools = []
    for tool in result.tools:
        data = tool.model_dump(mode="json", by_alias=True, exclude_none=True)
        data["_source"] = source
        tools.append(data)
    return tools


def _connector_tools(folder: Path) -> list[dict[str, Any]]:
    tools = []
    for path in sorted(folder.glob("*/connector.yaml")):
        try:
            manifest = load_manifest(path)
        except Exception:  # a provider manifest without agent blocks: its operations as plain tools
            tools += _raw_operations(path)
            continue
        if not manifest.exposed_operations:  # nothing marked for agents: every operation, as a plain tool
            tools += _raw_operations(path)
        for op in manifest.exposed_operations:
            tools.append({"name": manifest.tool_name(op), "description": op.description,
                          "inputSchema": op.input_schema or {"type": "object"},
                          "_source": f"connector:{manifest.connector_id}"})
    return tools


def _raw_operations(path: Path) -> list[dict[str, Any]]:
    doc = yaml.safe_load(path.read_text())
    connector = path.parent.name
    ops = doc.get("spec", {}).get("operations", [])
    return [{"name": f"{connector}_{re.sub(r'(?<!^)(?=[A-Z])', '_', op['name']).lower()}",
             "description": op.get("description", ""), "inputSchema": {"type": "object"},
             "_source": f"connector:{connector}"} for op in ops]


async def main(args: argparse.Namespace) -> None:
    tools: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as state:
        for name in ("dex_server", "plain_server", "tasks_server"):
            script = ROOT / "examples" / "servers" / f"{name}.py"
            params = StdioServerParameters(command=sys.executable, args=[str(script), "--transport", "stdio"],
                                           env={"DEX_EXAMPLE_STATE_DIR": state}, cwd=str(ROOT))
            tools += await _list(f"example:{name}", params)
    if args.everything:
        tools += await _list("npm:@modelcontextprotocol/server-everything",
                             StdioServerParameters(command="node", args=[args.everything, "stdio"]))
    if args.time_python:
        tools += await _list("pypi:mcp-server-time",
                             StdioServerParameters(command=args.time_python, args=["-m", "mcp_server_time"]))
    tools += _connector_tools(ROOT / "examples" / "connectors")
    for folder in args.connectors:
        tools += _connector_tools(Path(folder))
    OUT.write_text(json.dumps(tools, indent=1, sort_keys=True) + "\n")
    print(f"{len(tools)} tools -> {OUT}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--everything")
    parser.add_argument("--time-python")
    parser.add_argument("--connectors", action="append", default=[])
    anyio.run(main, parser.parse_args())
