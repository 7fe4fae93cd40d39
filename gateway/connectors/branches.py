"""SPEC section 7's branch -> outcome table: which answer a connector's branch becomes.

First matching row wins. The rows before the listing can only make an outcome unknown, so a
reviewer's listing can never turn a possibly-applied mutation into a plain failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal


class Verdict(StrEnum):
    SUCCESS = "success"
    REJECTED = "rejected"  # failed, outcome: rejected
    UNKNOWN = "unknown"  # outcome: unknown
    FAILED = "failed"  # isError, no outcome key


class Row(StrEnum):
    """The table's rows, in order; the fixtures name them."""

    UNCERTAIN = "uncertain"
    MUTATION_DEFECT = "mutation_defect"
    SUCCESS_BRANCH = "success_branch"
    MAYBE_SENT = "mutation_maybe_sent"
    LISTED_REJECTED = "listed_rejected"
    LISTED_UNKNOWN_OR_MUTATION_UNLISTED = "listed_unknown_or_mutation_unlisted"
    QUERY_UNLISTED = "query_unlisted"


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    row: Row


def decide(
    *,
    kind: Literal["query", "mutation"],
    branch: str,
    success_branches: frozenset[str],
    listing: Mapping[str, str],
    maybe_sent_before: bool,
) -> Decision:
    """The verdict for `branch` answered by an operation of `kind`.

    `maybe_sent_before`: an earlier attempt of this call (or of a call this one took over)
    may have reached the service without an answer coming back.
    """
    mutation = kind == "mutation"
    if branch == "uncertain":
        return Decision(Verdict.UNKNOWN, Row.UNCERTAIN)
    if mutation and branch == "defect":
        # The connector SDK also picks defect for attempts that already called the provider.
        return Decision(Verdict.UNKNOWN, Row.MUTATION_DEFECT)
    if branch in success_branches:
        return Decision(Verdict.SUCCESS, Row.SUCCESS_BRANCH)
    if mutation and maybe_sent_before:
        # "not applied" on this attempt says nothing about the earlier one.
        return Decision(Verdict.UNKNOWN, Row.MAYBE_SENT)
    listed = listing.get(branch)
    if listed == "rejected":
        return Decision(Verdict.REJECTED, Row.LISTED_REJECTED)
    if listed == "unknown" or mutation:
        return Decision(Verdict.UNKNOWN, Row.LISTED_UNKNOWN_OR_MUTATION_UNLISTED)
    return Decision(Verdict.FAILED, Row.QUERY_UNLISTED)
