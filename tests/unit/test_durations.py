"""One duration grammar (Go-style) for connector manifests and `fences purge --older-than`."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gateway.cli.main import older_than
from gateway.config.durations import parse_duration
from gateway.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("24h", 86_400.0), ("90m", 5_400.0), ("1m30s", 90.0), ("500ms", 0.5), ("1.5h", 5_400.0), ("0s", 0.0),
     ("2h45m", 9_900.0), ("250us", 250e-6), ("1µs", 1e-6), ("10ns", 10e-9)],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["7d", "3600", "", "h", "1 h", "-1s", "1H", "soon"])
def test_not_durations(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


def test_the_cli_reads_the_same_grammar() -> None:
    assert older_than(" 24h ") == timedelta(hours=24)
    assert older_than("1h30m") == timedelta(minutes=90)
    with pytest.raises(ConfigError, match=r"--older-than: cannot read '7d'; use e.g. 24h, 90m, 1h30m or 3600s"):
        older_than("7d")
