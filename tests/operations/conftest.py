"""Fixtures of the operations tests (issue 16): telemetry, metrics, drain, workers, connections,
rate limits, packaging. Real `dex-gateway serve` processes unless a test says otherwise."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
