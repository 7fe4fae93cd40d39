"""Make `tests.*` importable when pytest runs without the repo root on sys.path; the stack fixture."""

from collections.abc import Iterator

import pytest


from tests.agent_host.host_support import Stack, start_stack


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from start_stack(tmp_path_factory)
