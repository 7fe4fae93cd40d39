"""The fuzz's gateway fixture (one process for the module, target.py), and its figures printed at
the end of the run (terminal summary), so they can be quoted without -s."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.fuzz.oracle import FIGURES  # noqa: E402
from tests.fuzz.target import Fuzzed, fuzzed_gateway  # noqa: E402


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fuzzed]:
    with fuzzed_gateway(tmp_path_factory.mktemp("fuzz")) as target:
        yield target


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = FIGURES.lines()
    if lines:
        terminalreporter.section("front fuzz")
        for line in lines:
            terminalreporter.write_line(line)
