"""GET /admin/audit's parameters: what each reads, and the error that names a wrong one."""

from __future__ import annotations

import pytest

from gateway.audit.admin_api import BadParameter, parse_query
from gateway.audit.records import micros_from_iso


def test_parameters_are_read() -> None:
    query, before, limit = parse_query({"since": "2026-12-04T10:00:00Z", "principal": "alice", "tool": "",
                                        "outcome": "unknown", "limit": "20", "before": "991"})
    assert (query.since, query.principal, query.tool, query.outcome) == (
        micros_from_iso("2026-12-04T10:00:00Z"), "alice", None, "unknown")
    assert (before, limit) == (991, 20)
    assert parse_query({}) [1:] == (None, 100)
    # A `+01:00` offset sent without URL-encoding arrives as a space.
    assert parse_query({"since": "2026-12-04T11:00:00 01:00"})[0].since == micros_from_iso("2026-12-04T10:00:00Z")


@pytest.mark.parametrize(("params", "message"), [
    ({"since": "yesterday"}, "since: 'yesterday' is not an ISO 8601 time"),
    ({"outcome": "maybe"}, "outcome: 'maybe' is not one of ok, error, rejected, unknown, replayed"),
    ({"limit": "1001"}, "limit: at most 1000, not 1001"),
    ({"limit": "-3"}, "limit: must be at least 1, not -3"),
    ({"before": "ten"}, "before: 'ten' is not a whole number"),
    ({"principle": "alice"}, "unknown parameter 'principle'"),
])
def test_a_wrong_parameter_is_named(params: dict[str, str], message: str) -> None:
    with pytest.raises(BadParameter, match=message.replace("(", r"\(")):
        parse_query(params)
