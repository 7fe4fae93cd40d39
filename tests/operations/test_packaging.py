"""The container files checked against the app (no container engine runs here).

Dockerfile, deploy/gateway.yaml, deploy/docker-compose.yaml and deploy/kubernetes/*.yaml are read
as text/YAML and checked against the real CLI and app: the entrypoint parses as a `dex-gateway`
command line (with each file's extra arguments), the configs load and validate, ports agree, the
probe paths are routes the app answers, the user is not root and the root filesystem can be
read-only (every path the gateway writes is a mounted volume), tokens come from the Secret.
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gateway.server.app import create_app
from gateway.cli.main import _parser
from gateway.config.model import load_config

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
HEX = "ab" * 32


def _dockerfile() -> dict[str, list[str]]:
    """Instruction -> its arguments, continuation lines joined (last stage wins for repeats)."""
    text = (ROOT / "Dockerfile").read_text()
    text = re.sub(r"\\\n", " ", text)
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        out.setdefault(word.upper(), []).append(rest.strip())
    return out


def _pod() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "kubernetes" / "pod.yaml").read_text())


def _container(name: str) -> dict[str, Any]:
    return next(c for c in _pod()["spec"]["containers"] if c["name"] == name)


def _compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "docker-compose.yaml").read_text())


def test_dockerfile_entrypoint_user_and_files() -> None:
    docker = _dockerfile()
    entrypoint = json.loads(docker["ENTRYPOINT"][-1])
    assert entrypoint[:2] == ["dex-gateway", "serve"]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["dex-gateway"] == "gateway.cli.main:main"
    # The entrypoint with the CMD, the compose command and the pod's args parses as a command line.
    extra_args = [json.loads(docker["CMD"][-1]), _compose()["services"]["gateway"]["command"],
                  _container("dex-gateway")["args"]]
    for extra in extra_args:
        args = _parser().parse_args([*entrypoint[1:], *extra])
        assert args.run.__name__ == "_serve"
    user = docker["USER"][-1].split(":")[0]
    assert user.isdigit() and int(user) != 0
    assert docker["EXPOSE"] == ["8080"]
    assert docker["STOPSIGNAL"] == ["SIGTERM"]
    assert "/healthz" in docker["HEALTHCHECK"][-1]
    for copy in docker["COPY"]:
        source = copy.split()[0]
        if not source.startswith("--"):
            assert (ROOT / source).exists(), source
    env = " ".join(docker["ENV"])
    assert "DEX_GATEWAY_CONFIG=/etc/dex-gateway/gateway.yaml" in env
    assert "PYTHONDONTWRITEBYTECODE=1" in env  # nothing written next to the code (read-only root)


def test_image_config_loads_and_serves_the_probes(tmp_path: Path) -> None:
    env = {"DEX_AGENT_TOKEN_SHA256": HEX, "DEX_ADMIN_TOKEN_SHA256": "cd" * 32,
           "DEX_FENCES_STORE": f"sqlite:///{tmp_path / 'gateway.db'}"}
    config = load_config(DEPLOY / "gateway.yaml", environ=env)
    assert config.server.host == "0.0.0.0" and config.server.port == 8080
    assert config.auth.enabled
    # The image's default store lives in the volume the image declares.
    docker = _dockerfile()
    assert "DEX_FENCES_STORE=sqlite:////var/lib/dex-gateway/gateway.db" in " ".join(docker["ENV"])
    assert '["/var/lib/dex-gateway"]' in docker["VOLUME"]
    _probes_answer(config)


def _probes_answer(config: Any) -> None:
    import anyio

    async def check() -> None:
        app = create_app(config)
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway-pod:8080") as c:
                assert (await c.get("/healthz")).status_code == 200
                assert (await c.get("/readyz")).status_code == 200
                assert (await c.get("/metrics")).status_code == 401  # auth is on

    anyio.run(check)


def test_kubernetes_sidecar_pod(tmp_path: Path) -> None:
    pod = _pod()
    gateway, agent = _container("dex-gateway"), _container("agent")
    configmap = yaml.safe_load((DEPLOY / "kubernetes" / "configmap.yaml").read_text())
    secret = yaml.safe_load((DEPLOY / "kubernetes" / "secret.yaml").read_text())

    # Probes on the app's health routes, on the port the config binds.
    config_text = configmap["data"]["gateway.yaml"]
    env = {"DEX_AGENT_TOKEN_SHA256": HEX, "DEX_ADMIN_TOKEN_SHA256": HEX, "DEX_METRICS_TOKEN_SHA256": "ef" * 32}
    path = tmp_path / "gateway.yaml"
    path.write_text(config_text.replace("/var/lib/dex-gateway", str(tmp_path)))
    config = load_config(path, environ=env)
    assert gateway["ports"][0]["containerPort"] == config.server.port == 8080
    assert gateway["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert gateway["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert gateway["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert pod["spec"]["terminationGracePeriodSeconds"] > config.server.drain_seconds
    _probes_answer(config)

    # Config from the ConfigMap, mounted where the image looks for it.
    mounts = {m["name"]: m["mountPath"] for m in gateway["volumeMounts"]}
    assert mounts["gateway-config"] == "/etc/dex-gateway" and "gateway.yaml" in configmap["data"]
    # Tokens from the Secret, through env: every ${VAR} of the config is set from it.
    from_secret = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in gateway["env"] if "valueFrom" in e}
    assert set(re.findall(r"\$\{(\w+)\}", config_text)) <= set(from_secret)
    for ref in from_secret.values():
        assert ref["name"] == secret["metadata"]["name"] and ref["key"] in secret["stringData"]
    agent_env = {e["name"]: e for e in agent["env"]}
    assert agent_env["DEX_AGENT_GATEWAY"]["value"] == f"http://127.0.0.1:{config.server.port}{config.server.path}"
    assert agent_env["DEX_AGENT_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] in secret["stringData"]

    # Not root, read-only root filesystem: the store's directory and /tmp are volumes.
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert pod["spec"]["securityContext"]["runAsUser"] == int(_dockerfile()["USER"][-1].split(":")[0])
    for container in (gateway, agent):
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
    store_dir = config.fences.store.removeprefix("sqlite:///").rsplit("/", 1)[0]
    assert store_dir == str(tmp_path)  # (rewritten above from /var/lib/dex-gateway)
    assert mounts["gateway-data"] == "/var/lib/dex-gateway" and mounts["tmp"] == "/tmp"


def test_compose_agent_gateway_postgres() -> None:
    services = _compose()["services"]
    assert set(services) == {"postgres", "gateway", "agent"}
    gateway, agent = services["gateway"], services["agent"]
    env = gateway["environment"]
    assert env["DEX_FENCES_STORE"].startswith("postgresql://") and "@postgres:5432/" in env["DEX_FENCES_STORE"]
    assert hashlib.sha256(agent["environment"]["DEX_AGENT_TOKEN"].encode()).hexdigest() == env["DEX_AGENT_TOKEN_SHA256"]
    assert agent["environment"]["DEX_AGENT_GATEWAY"] == "http://gateway:8080/mcp"
    assert gateway["ports"] == ["127.0.0.1:8080:8080"]
    assert gateway["read_only"] is True and "/tmp" in gateway["tmpfs"]
    assert int(gateway["stop_grace_period"].rstrip("s")) > 20
    assert "/readyz" in " ".join(gateway["healthcheck"]["test"])
    # The gateway's config: the image's file with this environment (the upstream comes from a
    # DEX_GATEWAY__ override) validates.
    config = load_config(DEPLOY / "gateway.yaml", environ={k: str(v) for k, v in env.items()})
    assert [u.name for u in config.upstreams] == ["payments"]
    assert config.fences.store == env["DEX_FENCES_STORE"]


@pytest.mark.parametrize("name", ["Dockerfile", "deploy/docker-compose.yaml", "deploy/kubernetes/pod.yaml"])
def test_files_name_no_host_of_ours(name: str) -> None:
    """Example files point at services by their compose/cluster names, never a real host."""
    text = (ROOT / name).read_text()
    assert not re.search(r"\b(?:10|172|192)\.\d+\.\d+\.\d+\b", text)
