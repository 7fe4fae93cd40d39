"""`dex-gateway check` prints its report without the SDK HTTP client's request log lines
(httpx2 logs every request at INFO)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.interop.support import reference_http
from tests.support.gateway import run_gateway_cli

pytestmark = pytest.mark.timeout(120)


def test_check_report_has_no_http_client_lines(tmp_path: Path) -> None:
    with reference_http(state_dir=tmp_path / "reference") as url:
        done = run_gateway_cli("check", url)
    output = done.stdout + done.stderr
    assert "passed" in output and "failed" in output, output
    assert "HTTP Request:" not in output, output
    assert " INFO httpx2" not in output, output
