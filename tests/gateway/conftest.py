"""Fixtures of the gateway end-to-end tests: real `dex-gateway serve` processes, real example
upstreams, and the official SDK client over HTTP in both protocol eras (helpers in helpers.py)."""

from __future__ import annotations


import pytest


from tests.gateway.helpers import ERAS


@pytest.fixture(params=ERAS)
def era(request: pytest.FixtureRequest) -> str:
    return str(request.param)
