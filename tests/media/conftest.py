"""Fixtures of the media tests: anyio on asyncio, a moto S3 server on loopback, the repo root importable."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.gateway.helpers import ERAS  # noqa: E402
from tests.support.s3 import CREDENTIALS, MotoS3, moto_s3  # noqa: E402


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # asyncpg and aiobotocore are asyncio-only


@pytest.fixture(scope="session")
def s3_server() -> Iterator[MotoS3]:
    """moto's S3 in server mode, on 127.0.0.1, for the whole run."""
    with moto_s3() as server:
        yield server


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials the standard AWS way (environment), as a deployment gives them."""
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture(params=ERAS)
def era(request: pytest.FixtureRequest) -> str:
    return str(request.param)
