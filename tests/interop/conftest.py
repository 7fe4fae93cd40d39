"""Fixtures of the interop tests (helpers in support.py)."""

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
