"""The protocol era of a version (gateway/protocol.py `Era`): one rule for every layer."""

from __future__ import annotations

import pytest
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from gateway.protocol import HANDSHAKE_VERSION, MODERN_VERSION, Era, client_takes_tasks


@pytest.mark.parametrize("version", HANDSHAKE_PROTOCOL_VERSIONS)
def test_every_handshake_version_is_of_the_handshake_era(version: str) -> None:
    assert Era.of(version) is Era.HANDSHAKE and Era.of(version.encode()) is Era.HANDSHAKE


@pytest.mark.parametrize("version", MODERN_PROTOCOL_VERSIONS)
def test_every_modern_version_is_of_the_modern_era(version: str) -> None:
    assert Era.of(version) is Era.MODERN and Era.of(version.encode()) is Era.MODERN and Era.of(version).modern


@pytest.mark.parametrize("version", [None, "", "2099-01-01", "modern"])
def test_an_absent_or_unknown_version_is_the_handshake_era(version: str | None) -> None:
    assert Era.of(version) is Era.HANDSHAKE and not Era.of(version).modern


def test_an_era_is_named_and_stored_by_its_newest_version() -> None:
    assert (Era.HANDSHAKE.value, Era.MODERN.value) == (HANDSHAKE_VERSION, MODERN_VERSION)
    assert HANDSHAKE_VERSION == HANDSHAKE_PROTOCOL_VERSIONS[-1] and MODERN_VERSION == MODERN_PROTOCOL_VERSIONS[-1]
    assert Era.of(Era.MODERN.value) is Era.MODERN  # a task record's stored era reads back as itself


def test_a_request_takes_tasks_only_when_it_declares_the_extension() -> None:
    declared = {"io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}
    assert client_takes_tasks(declared)
    assert not client_takes_tasks({}) and not client_takes_tasks(None)
    assert not client_takes_tasks({"io.modelcontextprotocol/clientCapabilities": {"extensions": {}}})
