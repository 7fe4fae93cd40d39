"""Fixtures of the media tests: anyio on asyncio, a moto S3 server on loopback, the repo root importable."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


from tests.gateway.helpers import ERAS
from tests.support.s3 import CREDENTIALS, MotoS3, moto_s3


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
