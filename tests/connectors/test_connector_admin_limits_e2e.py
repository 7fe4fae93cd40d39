"""The admin API against hostile manifests, on a real gateway process: the alias bomb, duplicate
keys and deep nesting are refused with a clear 400, a large manifest is read off the event loop,
and /healthz answers within 1 s during and after; a bomb already in the database does not stop a
replica from starting."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest
import yaml
from connector_support import manifest_doc
from test_connector_manifest_limits import big_manifest, operation

from gateway.connectors.storage import SqliteRegistrationStore, StoredRegistration, now_iso
from tests.support.gateway import RunningGateway, start_gateway, write_config
from tests.support.hostile import ALIAS_BOMB

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

ADMIN_TOKEN = "admin-limits-token"
HEALTH_DEADLINE = 1.0


def gateway_config(directory: Path) -> Path:
    return write_config(directory, {
        "auth": {"tokens": [{"principal": "agent", "token_sha256": hashlib.sha256(b"agent-limits-token").hexdigest()}],
                 "admin_token_sha256": hashlib.sha256(ADMIN_TOKEN.encode()).hexdigest()},
    })


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    with start_gateway(gateway_config(tmp_path_factory.mktemp("admin-limits"))) as running:
        yield running


def rss_bytes(gateway: RunningGateway) -> int:
    assert gateway.process is not None
    for line in Path(f"/proc/{gateway.process.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


class HealthProbe:
    """Asks /healthz every 20 ms; each answer must come within HEALTH_DEADLINE."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.answers: list[tuple[float, float, int | str]] = []  # (sent at, took, status or error)

    async def run(self) -> None:
        async with httpx.AsyncClient(base_url=self.base, timeout=HEALTH_DEADLINE) as http:
            while True:
                sent = time.monotonic()
                try:
                    status: int | str = (await http.get("/healthz")).status_code
                except httpx.HTTPError as exc:
                    status = type(exc).__name__
                self.answers.append((sent, time.monotonic() - sent, status))
                await anyio.sleep(0.02)

    def between(self, start: float, end: float) -> list[tuple[float, float, int | str]]:
        return [a for a in self.answers if start <= a[0] <= end]


async def post_manifest(http: httpx.AsyncClient, manifest: str, filename: str) -> tuple[httpx.Response, float, float]:
    started = time.monotonic()
    response = await http.post("/admin/connectors", json={"manifest": manifest, "filename": filename})
    return response, started, time.monotonic()


async def test_hostile_manifests_are_refused_and_healthz_keeps_answering(gateway: RunningGateway) -> None:
    big = big_manifest()
    assert len(json.dumps({"manifest": big})) < 1024 * 1024  # under the admin API's body limit
    duplicate = yaml.safe_dump(manifest_doc(operation("getInvoice"), name="dup"), sort_keys=False)
    duplicate = duplicate.replace("  name: dup\n", "  name: dup\n  name: dup2\n", 1)
    deep = "apiVersion: connectors.dex.dev/v1alpha1\nx: " + "[" * 100 + "]" * 100 + "\n"
    probe = HealthProbe(gateway.base)
    rss_before = rss_bytes(gateway)
    headers = {"authorization": f"Bearer {ADMIN_TOKEN}"}
    async with httpx.AsyncClient(base_url=gateway.base, headers=headers, timeout=60) as http:
        async with anyio.create_task_group() as tg:
            tg.start_soon(probe.run)
            await anyio.sleep(0.2)
            bomb, bomb_start, bomb_end = await post_manifest(http, ALIAS_BOMB, "connector.yaml")
            large, large_start, large_end = await post_manifest(http, big, "big/connector.yaml")
            dup, _, _ = await post_manifest(http, duplicate, "dup/connector.yaml")
            nested, _, _ = await post_manifest(http, deep, "deep/connector.yaml")
            after = time.monotonic()
            await anyio.sleep(0.5)
            tg.cancel_scope.cancel()
        listed = (await http.get("/admin/connectors")).json()["connectors"]

    assert bomb.status_code == 400, bomb.text
    assert bomb.json() == {"error": "connector.yaml:6: more than 100000 values (aliases expanded)",
                           "file": "connector.yaml", "line": 6}
    assert bomb_end - bomb_start < 1.0
    assert rss_bytes(gateway) - rss_before < 100 * 1024 * 1024
    assert large.status_code == 201, large.text
    assert dup.status_code == 400 and dup.json()["error"] == "dup/connector.yaml:5: duplicate key 'metadata.name'", dup.text
    assert nested.status_code == 400 and "nested deeper than 64 levels" in nested.json()["error"], nested.text
    assert [c["connector_id"] for c in listed] == ["billing"]

    slow = [a for a in probe.answers if a[2] != 200 or a[1] >= HEALTH_DEADLINE]
    assert not slow, f"/healthz failed or took {HEALTH_DEADLINE} s or more: {slow}"
    # The probe really ran while the large manifest was being read, and after everything.
    assert large_end - large_start > 0.3
    assert len(probe.between(large_start, large_end)) >= 5, probe.answers
    assert probe.between(after, after + 10), "no /healthz answer after the hostile posts"


async def test_a_stored_bomb_does_not_stop_a_replica_from_starting(tmp_path: Path) -> None:
    """Every replica re-reads the stored registrations at start: the bomb is left out there too."""
    store = SqliteRegistrationStore.from_url(f"sqlite:///{tmp_path / 'fences.db'}")
    await store.open()
    now = now_iso()
    await store.put(StoredRegistration(connector_id="bomb", filename="connector.yaml", manifest=ALIAS_BOMB,
                                       binding=None, created_at=now, updated_at=now))
    await store.close()
    started = time.monotonic()
    with start_gateway(gateway_config(tmp_path)) as running:
        assert time.monotonic() - started < 15
        async with httpx.AsyncClient(base_url=running.base, timeout=HEALTH_DEADLINE) as http:
            assert (await http.get("/healthz")).status_code == 200
            listed = await http.get("/admin/connectors", headers={"authorization": f"Bearer {ADMIN_TOKEN}"})
        assert listed.status_code == 200 and listed.json()["connectors"] == []
        assert "connector registration bomb is left out here" in running.log
