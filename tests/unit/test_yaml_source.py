"""The one document loader (config, manifests, bindings, stored registrations): hostile input is
refused fast with a message naming the limit and the line; duplicates are errors in YAML and
JSON; lines are kept for every key."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from gateway.config.yaml_source import (
    DEFAULT_LIMITS,
    DuplicateKey,
    LimitExceeded,
    SourceError,
    SourceLimits,
    load_file,
    load_json,
    load_source,
    load_yaml,
)
from tests.support.hostile import ALIAS_BOMB


def test_the_alias_bomb_is_refused_fast_naming_the_limit_and_line() -> None:
    assert len(ALIAS_BOMB.encode()) < 500
    started = time.perf_counter()
    with pytest.raises(LimitExceeded) as caught:
        load_yaml(ALIAS_BOMB, "bomb.yaml")
    assert time.perf_counter() - started < 0.5
    # Refused at the first line whose expansion passes the limit, not at the end of the walk.
    assert str(caught.value) == f"bomb.yaml:6: more than {DEFAULT_LIMITS.max_nodes} values (aliases expanded)"
    assert caught.value.line == 6


def test_too_many_aliases() -> None:
    text = "x: &x 1\nlist: [" + ", ".join(["*x"] * 101) + "]\n"
    with pytest.raises(LimitExceeded, match=r"^t.yaml:2: more than 100 aliases"):
        load_yaml(text, "t.yaml")
    # A few aliases, as real manifests use them, are fine, and every path gets its lines.
    doc = load_yaml("base: &b\n  timeout: 30s\nop1: *b\nop2: *b\n", "t.yaml")
    assert doc.data == {"base": {"timeout": "30s"}, "op1": {"timeout": "30s"}, "op2": {"timeout": "30s"}}
    assert doc.lines[("op2", "timeout")] == 2 and doc.lines[("op2",)] == 4


def test_a_recursive_alias_is_refused() -> None:
    with pytest.raises(LimitExceeded, match=r"^t.yaml:1: alias \*a refers to a node that contains it"):
        load_yaml("a: &a [1, *a]\n", "t.yaml")


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_deep_nesting_is_refused(fmt: str) -> None:
    text = "[" * 65 + "]" * 65
    with pytest.raises(LimitExceeded, match=f"nested deeper than {DEFAULT_LIMITS.max_depth} levels"):
        load_source(text, f"deep.{fmt}")
    load_source("[" * 64 + "]" * 64, f"ok.{fmt}")  # the limit itself is allowed
    # Far deeper than Python's recursion limit: still a clean refusal, quickly (libyaml's own
    # depth limit may speak first).
    started = time.perf_counter()
    with pytest.raises(SourceError, match="nest"):
        load_source("[" * 200_000 + "]" * 200_000, f"very-deep.{fmt}")
    assert time.perf_counter() - started < 1


def test_depth_counts_aliases_expanded() -> None:
    inner = "[" * 40 + "]" * 40
    with pytest.raises(LimitExceeded, match=r"nested deeper than 64 levels \(aliases expanded\)"):
        load_yaml(f"a: &a {inner}\nb: " + "[" * 30 + "*a" + "]" * 30 + "\n", "t.yaml")


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_large_documents_are_refused(fmt: str, tmp_path: Path) -> None:
    big = json.dumps({"pad": "x" * DEFAULT_LIMITS.max_bytes})
    with pytest.raises(LimitExceeded, match=f"over the size limit of {DEFAULT_LIMITS.max_bytes} bytes"):
        load_source(big, f"big.{fmt}")
    # A file is refused by its size, before it is read.
    path = tmp_path / f"big.{fmt}"
    path.write_text(big)
    with pytest.raises(LimitExceeded, match=f"^{path}: file is over the size limit"):
        load_file(path)
    # Multi-byte text counts in bytes.
    with pytest.raises(LimitExceeded):
        load_source(json.dumps("é" * (DEFAULT_LIMITS.max_bytes // 2 + 1), ensure_ascii=False), f"wide.{fmt}")


def test_many_values_are_refused_without_aliases() -> None:
    limits = SourceLimits(max_nodes=1_000)
    with pytest.raises(LimitExceeded, match="more than 1000 values"):
        load_yaml("[" + ", ".join(["1"] * 1_000) + "]", "t.yaml", limits)
    with pytest.raises(LimitExceeded, match="more than 1000 values"):
        load_json("[" + ", ".join(["1"] * 1_000) + "]", "t.json", limits)


def test_the_time_budget_stops_the_reading() -> None:
    with pytest.raises(LimitExceeded, match=r"^t.yaml:1: reading took longer than the time budget of 0 s"):
        load_yaml("a: 1\n", "t.yaml", SourceLimits(time_budget_seconds=0))


@pytest.mark.parametrize(
    ("text", "source", "line", "key"),
    [
        ("a: 1\nb:\n  c: 1\n  c: 2\n", "t.yaml", 4, "b.c"),
        ('{"a": 1,\n "b": {"c": 1,\n   "c": 2}}', "t.json", 3, "b.c"),
        ("list:\n  - {x: 1, x: 1}\n", "t.yaml", 2, "list.0.x"),
    ],
)
def test_duplicate_keys_are_errors_naming_file_line_and_key(text: str, source: str, line: int, key: str) -> None:
    with pytest.raises(DuplicateKey) as caught:
        load_source(text, source)
    assert str(caught.value) == f"{source}:{line}: duplicate key {key!r}"


def test_duplicate_keys_in_json_that_yaml_cannot_read() -> None:
    # A key over 1024 characters is JSON but not a YAML simple key: still refused, without a line.
    key = "k" * 1100
    with pytest.raises(DuplicateKey, match=f"^t.json: duplicate key '{key}'"):
        load_json(f'{{"{key}": 1, "{key}": 2}}', "t.json")


def test_merge_keys_keep_what_is_written_here() -> None:
    doc = load_yaml("base: &b {x: 1, y: 2}\nd:\n  <<: *b\n  y: 3\n", "t.yaml")
    assert doc.data["d"] == {"x": 1, "y": 3}


def test_json_numbers_are_json_numbers_and_lines_are_kept() -> None:
    doc = load_json('{"n": 1e5,\n "big": 12345678901234567890,\n "s": "\\u00e9"}', "t.json")
    assert doc.data == {"n": 100000.0, "big": 12345678901234567890, "s": "é"}
    assert doc.lines[("big",)] == 2 and doc.where(("s",)) == "t.json:3"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("a: !!python/object:os.system {}\n", "unsupported tag"),
        ("a: !custom 1\n", "not valid YAML"),
        ("? [a, b]\n: 1\n", "a key must be a plain value"),
        ("a: [1,\nb: }", "not valid YAML"),
        ("a: 1\n---\nb: 2\n", "not valid YAML: expected a single document in the stream, but found another"),
    ],
)
def test_other_refusals(text: str, problem: str) -> None:
    with pytest.raises(SourceError, match=problem):
        load_yaml(text, "t.yaml")


def test_empty_document_is_an_empty_mapping() -> None:
    assert load_yaml("", "t.yaml").data == {}
    assert load_yaml("# only a comment\n", "t.yaml").data == {}
