"""`dex-gateway tasks list|show|cancel` against a running gateway's store (SQLite)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.support.gateway import http_upstream, run_gateway_cli, start_gateway, write_config
from tests.support.servers import start_http_server
from tests.tasks.tasks_support import HANDSHAKE, post, result_of, task_id_of, wait_task


def test_operator_lists_shows_and_cancels_a_task(tmp_path: Path) -> None:
    with start_http_server("tasks_server", state_dir=tmp_path / "up") as upstream:
        # A short lease: the running process notices the operator's cancel at its next renewal.
        config = write_config(tmp_path, {"upstreams": [http_upstream("t", upstream.url)],
                                         "fences": {"store": f"sqlite:///{tmp_path / 'gw.db'}", "lease_seconds": 1.5}})
        with start_gateway(config) as gateway:
            params = {"name": "t__slow_compute", "arguments": {"seconds": 60}, "task": {"ttl": 120_000}}
            task_id = task_id_of(result_of(post(gateway.url, "tools/call", params, era=HANDSHAKE)))
            time.sleep(0.5)
            listed = run_gateway_cli("tasks", "list", "--json", "--config", str(config))
            assert listed.returncode == 0, listed.stderr
            [row] = [r for r in json.loads(listed.stdout) if r["task_id"] == task_id]
            assert row["status"] == "working" and row["principal"] == "anonymous" and row["upstream_task_id"]
            table = run_gateway_cli("tasks", "list", "--config", str(config))
            assert table.returncode == 0 and task_id in table.stdout and "TASK_ID" in table.stdout, table.stderr
            shown = run_gateway_cli("tasks", "show", task_id, "--config", str(config))
            assert shown.returncode == 0, shown.stderr
            assert json.loads(shown.stdout)["tool"] == "t__slow_compute"
            cancelled = run_gateway_cli("tasks", "cancel", task_id, "--config", str(config))
            assert cancelled.returncode == 0 and "cancelled" in cancelled.stdout, cancelled.stderr
            assert wait_task(gateway.url, task_id, era=HANDSHAKE)["status"] == "cancelled"
            # The running process stopped the upstream task too.
            deadline = time.monotonic() + 10
            while any(t["status"] == "working" for t in result_of(post(upstream.url, "tasks/list", {}, era=HANDSHAKE))["tasks"]):
                assert time.monotonic() < deadline, "the upstream task was not cancelled"
                time.sleep(0.2)
            assert run_gateway_cli("tasks", "show", "nope", "--config", str(config)).returncode == 1
