"""Every library the shipped code imports comes with `pip install dex-mcp-gateway`.

A module that is only in the developer's virtualenv by accident (installed by hand, or by
another tool) passes every local test and fails CI at collection, as `prometheus_client` once
did. This test reads the imports of `gateway/` and `agent_host/` and checks that each one is the
standard library, our own code, or provided by a distribution that the project's declared
requirements pull in (directly or through their own requirements; optional extras are not
followed, so an import that needs one must be declared in the main list or guarded).
"""

from __future__ import annotations

import ast
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "dex-mcp-gateway"
FIRST_PARTY = {"gateway", "agent_host"}
# Imported only where a config option asks for it, inside the function that needs it, with a
# clear error when missing (documented as an extra): `rate_limits.store: redis://...`.
OPTIONAL = {"redis"}


def _name(requirement: str) -> tuple[str, bool]:
    """The distribution a requirement names, and whether it applies without extras."""
    name = re.split(r"[\s\[<>=!~;(]", requirement, maxsplit=1)[0]
    marker = requirement.split(";", 1)[1] if ";" in requirement else ""
    return _normal(name), "extra ==" not in marker and "extra==" not in marker


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _direct() -> set[str]:
    """The distributions the project's main requirement list names (extras not included)."""
    direct = set()
    for requirement in metadata.requires(PROJECT) or []:
        name, always = _name(requirement)
        if always:
            direct.add(name)
    return direct


def _imports() -> dict[str, str]:
    """Top-level module -> one place that imports it."""
    found: dict[str, str] = {}
    for folder in FIRST_PARTY:
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    found.setdefault(name.split(".")[0], f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_every_import_is_declared_directly() -> None:
    """An import may not ride on another library's requirement: `httpx2` once came only through `mcp`."""
    direct = _direct()
    assert len(direct) > 10, "the project itself is not installed (pip install -e .)"
    providers = metadata.packages_distributions()
    missing = []
    for module, where in sorted(_imports().items()):
        if module in sys.stdlib_module_names or module in FIRST_PARTY or module in OPTIONAL or module == "__future__":
            continue
        dists = {_normal(d) for d in providers.get(module, [])}
        if not dists & direct:
            missing.append(f"{module} (imported at {where}; installed by: {sorted(dists) or 'nothing'})")
    assert not missing, "imported but not declared in pyproject.toml's dependencies:\n" + "\n".join(missing)


# Declared for what they do without being imported by name: uvicorn loads the first two when
# asked for `loop="uvloop"` / `http="httptools"`; the OTLP exporter is loaded by the
# OpenTelemetry SDK's entry points when OTEL_TRACES_EXPORTER=otlp.
USED_WITHOUT_IMPORT = {"uvloop", "httptools", "opentelemetry-exporter-otlp-proto-http"}


def test_every_declared_requirement_is_used() -> None:
    """The other direction: a requirement nothing imports is weight every install carries."""
    providers = metadata.packages_distributions()
    imported = {
        _normal(dist)
        for module in _imports()
        for dist in providers.get(module, [])
    }
    unused = sorted(_direct() - imported - USED_WITHOUT_IMPORT)
    assert not unused, f"declared in pyproject.toml but imported nowhere in gateway/ or agent_host/: {unused}"


def test_the_optional_imports_are_declared_as_extras() -> None:
    extras = metadata.metadata(PROJECT).get_all("Provides-Extra") or []
    assert "redis" in extras


def test_a_redis_url_without_the_redis_extra_is_a_clear_config_error(monkeypatch: pytest.MonkeyPatch) -> None:

    from gateway.errors import ConfigError
    from gateway.pipeline.ratelimits import RedisBuckets

    monkeypatch.setitem(sys.modules, "redis", None)  # as if the extra were not installed
    monkeypatch.setitem(sys.modules, "redis.asyncio", None)
    with pytest.raises(ConfigError, match=r"pip install 'dex-mcp-gateway\[redis\]'"):
        RedisBuckets("redis://127.0.0.1:6379/0", "dex-test:")
