"""The import graph of the packages' layers: no cycle, and no import from a lower layer to a higher one.

Every import counts: at module level, inside functions and under `if TYPE_CHECKING:` — an
import a type checker follows is a dependency as much as one the interpreter runs. The layers
are declared here, in `LAYERS`, and only here: one entry per package, its layers lowest first.
A layer is a subpackage or a module directly in the package; a module imports only from its own
layer and lower ones. Checking another package is one more entry.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

# package -> its layers, lowest first.
LAYERS: dict[str, list[str]] = {
    "gateway": [
        "errors",          # the one exception tree
        "internals",       # every reach into a library's private API
        "protocol",        # the gateway's name and version on the wire
        "name_header",     # the Mcp-Name header rule (front and upstreams)
        "safe_text",       # text made safe to show on a card or a terminal (approvals, the agent host)
        "text_table",      # the CLIs' plain-text tables
        "conventions",     # the Dex conventions: effects, keys, outcomes, answers, the checker
        "storage",         # databases, store URLs, private files
        "config",          # gateway.yaml: the model, YAML with line numbers, env overrides
        "supervision",     # background work that is logged, counted and restarted
        "telemetry",       # tracing and metrics
        "auth",            # principals and their scope
        "admin_json",      # what every admin route answers alike: errors, 401/403, a JSON body
        "fences",          # the idempotency fences
        "audit",           # the audit log: rows, stores, writer, admin API
        "approvals",       # calls held for a person's decision: records, store, admin API
        "pins",            # pinned tool definitions: digests, store, review
        "media",           # images stored once by SHA-256
        "connectors",      # tools registered by manifest
        "upstreams",       # MCP servers behind the gateway: stdio and HTTP
        "pipeline",        # the one tools/call tail, the catalog, limits, passthrough
        "tasks",           # MCP tasks, both eras
        "http",            # edge middleware: hosts, bearer auth, body limit, /metrics
        "front",           # the MCP front: fast path and the SDK server
        "server",          # the process: app, runtime, serve, workers, drain, operations
        "cli",             # dex-gateway's commands
    ],
    "agent_host": [
        "models",          # model clients: protocol, scripted, OpenAI-compatible
        "domain",          # records, settings, texts, cards, credentials
        "store",           # the SQLite session store
        "gateway_client",  # the gateway as the tool source
        "approvals",       # the approval gate and its deciders
        "turn",            # the turn loop and what runs in a turn
        "terminal",        # the console
        "api",             # the host's HTTP API and web page
        "host",            # the composition root (host.py)
        "service",         # dex-agent serve: the driver that runs every session's turns
        "cli",             # dex-agent's commands
    ],
}


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules(root: Path, package: str) -> dict[str, Path]:
    return {module_name(root, path): path for path in sorted((root / package).rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> list[Import]:
    """Every import in the module's source (module level, functions, `TYPE_CHECKING` blocks),
    resolved to the modules of `known` it names: `from a import b` names `a.b` when that is a
    module, else `a`."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found: list[Import] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        for target in targets:
            # `import a.b.c` depends on the deepest of a.b.c, a.b, a that is one of ours.
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.append(Import(name, target, node.lineno))
    return found


def import_graph(root: Path, package: str) -> list[Import]:
    modules = package_modules(root, package)
    return [edge for name, path in modules.items() for edge in imports_of(name, path, set(modules))]


def layer_of(module: str, package: str) -> str | None:
    """The module's layer: its first name below the package (None for the package's __init__)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def cycles(edges: list[Import]) -> list[list[str]]:
    """The import cycles: strongly connected components of more than one module (Tarjan)."""
    graph: dict[str, set[str]] = {}
    for edge in edges:
        graph.setdefault(edge.importer, set()).add(edge.imported)
        graph.setdefault(edge.imported, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def layer_violations(root: Path, package: str, layers: list[str]) -> list[str]:
    """Modules outside every declared layer, and imports from a lower layer to a higher one."""
    rank = {layer: n for n, layer in enumerate(layers)}
    problems: list[str] = []
    for module in package_modules(root, package):
        layer = layer_of(module, package)
        if layer is not None and layer not in rank:
            problems.append(f"{module}: in no declared layer of {package} (LAYERS in {Path(__file__).name})")
    for edge in import_graph(root, package):
        low, high = layer_of(edge.importer, package), layer_of(edge.imported, package)
        if low is None or high is None or low not in rank or high not in rank:
            continue
        if rank[high] > rank[low]:
            problems.append(f"{edge.importer} (layer {low}) line {edge.line} imports {edge.imported} (higher layer {high})")
    return problems


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_no_import_cycles(package: str) -> None:
    found = cycles(import_graph(REPO_ROOT, package))
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_imports_go_down_the_layers(package: str) -> None:
    problems = layer_violations(REPO_ROOT, package, LAYERS[package])
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_every_declared_layer_exists(package: str) -> None:
    present = {layer_of(m, package) for m in package_modules(REPO_ROOT, package)}
    assert [layer for layer in LAYERS[package] if layer not in present] == []


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_graph_sees_imports_in_functions_and_under_type_checking(tmp_path: Path) -> None:
    """The checker itself: a cycle hidden in a function and under TYPE_CHECKING is one, and an
    upward import in either place is refused."""
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/low/__init__.py": "",
        "pkg/low/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..high import b\n",
        "pkg/high/__init__.py": "",
        "pkg/high/b.py": "def f():\n    from pkg.low import a\n    return a\n",
        "pkg/high/c.py": "from . import b\nimport pkg.low.a\n",
        "pkg/stray.py": "",
    })
    edges = import_graph(tmp_path, "pkg")
    assert {(e.importer, e.imported) for e in edges} == {
        ("pkg.low.a", "pkg.high.b"), ("pkg.high.b", "pkg.low.a"), ("pkg.high.c", "pkg.high.b"), ("pkg.high.c", "pkg.low.a"),
    }
    assert cycles(edges) == [["pkg.high.b", "pkg.low.a"]]
    problems = layer_violations(tmp_path, "pkg", ["low", "high"])
    assert problems == [
        "pkg.stray: in no declared layer of pkg (LAYERS in test_import_layers.py)",
        "pkg.low.a (layer low) line 3 imports pkg.high.b (higher layer high)",
    ]
