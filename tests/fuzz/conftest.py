"""The fuzz's gateway fixture (one process for the module, target.py), and its figures printed at
the end of the run (terminal summary), so they can be quoted without -s."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


from tests.fuzz.oracle import FIGURES
from tests.fuzz.target import Fuzzed, fuzzed_gateway


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
