"""Fixtures of the gateway end-to-end tests: real `dex-gateway serve` processes, real example
upstreams, and the official SDK client over HTTP in both protocol eras (helpers in helpers.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.gateway.helpers import ERAS  # noqa: E402


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=ERAS)
def era(request: pytest.FixtureRequest) -> str:
    return str(request.param)
