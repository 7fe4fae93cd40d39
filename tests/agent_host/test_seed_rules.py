"""The seeds' smaller rules, one test each (the texts are in agent_host/domain/texts.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_host.domain.cards import DEFAULT_APPROVAL_TIMEOUT_SECONDS, parse_deadline
from tests.agent_host.host_support import run_agent


def test_approval_and_question_deadlines_are_optional_and_none_by_default(tmp_path: Path) -> None:
    assert DEFAULT_APPROVAL_TIMEOUT_SECONDS is None
    assert parse_deadline("none") is None and parse_deadline("NONE") is None and parse_deadline("2.5") == 2.5
    for bad in ("0", "-1", "soon", "inf"):
        with pytest.raises(ValueError, match="none"):
            parse_deadline(bad)
    done = run_agent("run", "--gateway", "http://127.0.0.1:9/mcp", "--store", str(tmp_path / "s.db"),
                     "--approval-timeout", "later", "hi")
    assert done.returncode == 2
    assert "argument --approval-timeout: 'later' is not a number of seconds or `none`" in done.stderr
