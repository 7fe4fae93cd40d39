"""Fixtures for the connector tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from connector_support import ExampleService, start_service  # noqa: E402


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExampleService]:
    with start_service(tmp_path_factory.mktemp("connector-service")) as svc:
        yield svc


@pytest.fixture
def fresh_service(service: ExampleService) -> ExampleService:
    service.reset()
    return service
