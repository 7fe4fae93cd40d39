"""The conventions fixtures (SPEC section 9): the rules of sections 3 and 7, case by case.

`fixtures.json` ships in the package so the gateway's tests, the `check` CLI and users
testing their own servers read the same cases. Sections are independent: a reader takes the
sections it knows and ignores the others, so new sections never break old readers.
"""

from __future__ import annotations

import json
from importlib import resources

from ..protocol import JsonObject

FIXTURES_FORMAT = "dex-conventions-fixtures"
SUPPORTED_VERSIONS = frozenset({1})


def load_fixtures() -> JsonObject:
    """The whole fixtures document, checked for format and version (read fresh each time)."""
    text = resources.files(__package__).joinpath("fixtures.json").read_text(encoding="utf-8")
    document = json.loads(text)
    if not isinstance(document, dict):
        raise ValueError("fixtures.json: the document must be a JSON object")
    if document.get("format") != FIXTURES_FORMAT:
        raise ValueError(f"fixtures.json: format is {document.get('format')!r}, expected {FIXTURES_FORMAT!r}")
    if document.get("version") not in SUPPORTED_VERSIONS:
        raise ValueError(f"fixtures.json: version {document.get('version')!r} is not supported")
    if not isinstance(document.get("sections"), dict):
        raise ValueError("fixtures.json: 'sections' must be an object")
    return document


def cases(section: str) -> list[JsonObject]:
    """The cases of one section; a missing section is an error, never an empty test run."""
    sections = load_fixtures()["sections"]
    if section not in sections:
        raise KeyError(f"fixtures.json has no section {section!r} (has: {', '.join(sorted(sections))})")
    return list(sections[section])
