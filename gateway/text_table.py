"""A plain-text table for the CLIs (`tools list`, `tasks list`, `audit list`): a header of the column
names in capitals, then one line a row, each column as wide as its widest cell."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["print_table"]


def print_table(rows: Sequence[Mapping[str, object]], columns: Sequence[str]) -> None:
    widths = {c: max([len(c)] + [len(str(r[c])) for r in rows]) for c in columns}
    print("  ".join(c.upper().ljust(widths[c]) for c in columns).rstrip())
    for row in rows:
        print("  ".join(str(row[c]).ljust(widths[c]) for c in columns).rstrip())
