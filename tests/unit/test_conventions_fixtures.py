"""The conventions fixtures drive these tests: one driver per section, one test per case."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from gateway.conventions import (
    OUTCOME_KEY,
    Answer,
    Classification,
    Effect,
    Interrupted,
    NotSent,
    Replied,
    RpcError,
    SendAgain,
    ToolPolicy,
    classify_tool,
    connector_tool_name,
    exposed_tool_name,
    publish_annotations,
    publish_tool_meta,
    rejected,
    resolve_attempt,
    sanitize,
    unknown,
)
from gateway.conventions.fixtures import cases, load_fixtures
from gateway.conventions.keys import APPROVAL_KEY, DEX_PREFIX, EFFECT_KEY
from gateway.conventions.outcomes import AttemptEvent

OUTCOMES_LOGGER = "gateway.conventions.outcomes"
# Sections this module drives; others (connector_branches, ...) belong to other test modules.
DRIVEN_SECTIONS = ("classification", "published", "outcomes", "retries", "own_answers", "names")


def by_id(section: str) -> Any:
    return pytest.mark.parametrize("case", cases(section), ids=lambda c: c["id"])


# --- the file itself -------------------------------------------------------------------------


def test_fixtures_document_is_versioned() -> None:
    document = load_fixtures()
    assert document["format"] == "dex-conventions-fixtures"
    assert document["version"] == 1
    assert document["description"]


def test_every_section_is_non_empty_and_ids_are_unique() -> None:
    sections = load_fixtures()["sections"]
    assert set(DRIVEN_SECTIONS) <= set(sections)
    ids: list[str] = []
    for name, section in sections.items():
        assert section, f"section {name} is empty"
        for case in section:
            assert {"id", "rule", "input", "expect"} <= set(case), case.get("id")
            ids.append(case["id"])
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    assert not duplicates


def test_missing_section_is_an_error() -> None:
    with pytest.raises(KeyError):
        cases("no_such_section")


# --- classification and publication ----------------------------------------------------------


def classify(inp: dict[str, Any]) -> Classification:
    policy = inp.get("policy")
    return classify_tool(
        inp.get("meta"),
        inp.get("annotations"),
        trusts_annotations=inp.get("trusts_annotations", True),
        default_effect=Effect(inp.get("default_effect", "unclassified")),
        policy=None
        if policy is None
        else ToolPolicy(
            effect=Effect(policy["effect"]) if policy.get("effect") else None,
            requires_approval=policy.get("requires_approval"),
        ),
    )


@by_id("classification")
def test_classification(case: dict[str, Any]) -> None:
    c = classify(case["input"])
    expect = case["expect"]
    got = {
        "effect": c.effect.value,
        "requires_approval": c.requires_approval,
        "declared": c.declared,
        "warns": bool(c.warnings),
    }
    assert got == expect, case["rule"]


@by_id("published")
def test_published(case: dict[str, Any]) -> None:
    inp = case["input"]
    c = classify(inp)
    trusted = inp.get("trusts_annotations", True)
    assert publish_tool_meta(inp.get("meta"), c) == case["expect"]["meta"], case["rule"]
    annotations = publish_annotations(inp.get("annotations"), c, trusted=trusted)
    assert annotations == case["expect"]["annotations"], case["rule"]


@by_id("classification")
def test_published_tool_classifies_the_same_for_every_client(case: dict[str, Any]) -> None:
    """SPEC 3: an annotations-only client derives the effect a keys-aware client derives, and a
    keys-aware client reading the gateway's listing gets the gateway's classification."""
    inp = case["input"]
    c = classify(inp)
    meta = publish_tool_meta(inp.get("meta"), c)
    annotations = publish_annotations(inp.get("annotations"), c, trusted=inp.get("trusts_annotations", True))
    keys_aware = classify_tool(meta, annotations)
    annotations_only = classify_tool(None, annotations)
    assert keys_aware.effect == c.effect
    # Annotations cannot name non_idempotent_write apart from unclassified; both behave alike
    # (write, asks by default, never sent again), which is what a client acts on.
    assert behaviour(annotations_only.effect) == behaviour(c.effect)
    # No key can say "do not ask" for an unclassified tool; everything else round-trips.
    if c.effect is not Effect.UNCLASSIFIED or c.requires_approval:
        assert keys_aware.requires_approval == c.requires_approval
    assert not keys_aware.warnings


def behaviour(effect: Effect) -> tuple[bool, bool, bool]:
    return effect.is_write, effect.asks_by_default, effect.resendable


def test_publish_never_invents_dex_keys() -> None:
    c = classify_tool(None, None)
    assert publish_tool_meta(None, c) == {APPROVAL_KEY: "recommended"}
    read = classify_tool({EFFECT_KEY: "read"}, None)
    assert all(not k.startswith(DEX_PREFIX) or k == EFFECT_KEY for k in publish_tool_meta(None, read))


# --- outcomes ---------------------------------------------------------------------------------


def event_of(wire: dict[str, Any]) -> AttemptEvent:
    kind = wire["kind"]
    if kind == "replied":
        return Replied(Answer.from_wire(wire["answer"]))
    if kind == "rpc_error":
        return RpcError(wire["code"], wire["message"], wire.get("data"))
    if kind == "not_sent":
        return NotSent(wire["reason"])
    if kind == "interrupted":
        return Interrupted(wire["reason"])
    raise AssertionError(f"unknown event kind {kind!r}")


def check_result(result: Answer | SendAgain, expect: dict[str, Any], rule: str) -> None:
    if expect.get("send_again"):
        assert isinstance(result, SendAgain), rule
        return
    assert isinstance(result, Answer), rule
    answer = expect["answer"]
    if "wire" in answer:
        assert result.to_wire() == answer["wire"], rule
        return
    assert result.is_error == answer["is_error"], rule
    assert (result.meta or {}).get(OUTCOME_KEY) == answer["outcome"], rule
    for fragment in answer.get("text_contains", []):
        assert fragment in result.text, f"{rule}: {fragment!r} not in {result.text!r}"
    for fragment in answer.get("text_excludes", []):
        assert fragment not in result.text, f"{rule}: {fragment!r} in {result.text!r}"


def warned(caplog: pytest.LogCaptureFixture) -> bool:
    return any(r.name == OUTCOMES_LOGGER and r.levelno == logging.WARNING for r in caplog.records)


@by_id("outcomes")
def test_outcomes(case: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    inp, expect = case["input"], case["expect"]
    caplog.set_level(logging.WARNING, logger=OUTCOMES_LOGGER)
    result = resolve_attempt(
        inp["tool"],
        Effect(inp["effect"]),
        inp["attempt"],
        event_of(inp["event"]),
        max_attempts=inp.get("max_attempts", 3),
    )
    check_result(result, expect, case["rule"])
    assert warned(caplog) == expect["warns"], case["rule"]


@by_id("retries")
def test_retries(case: dict[str, Any]) -> None:
    inp, expect = case["input"], case["expect"]
    events = inp["events"]
    result: Answer | SendAgain | None = None
    attempts = 0
    for attempts, wire in enumerate(events, start=1):
        result = resolve_attempt(
            inp["tool"],
            Effect(inp["effect"]),
            attempts,
            event_of(wire),
            max_attempts=inp.get("max_attempts", 3),
        )
        if isinstance(result, Answer):
            break
    assert attempts == expect["attempts"] == len(events), case["rule"]
    assert result is not None
    check_result(result, expect, case["rule"])


@by_id("own_answers")
def test_own_answers(case: dict[str, Any]) -> None:
    make = {"rejected": rejected, "unknown": unknown}[case["input"]["kind"]]
    assert make(case["input"]["text"]).to_wire() == case["expect"]["wire"], case["rule"]


def test_attempt_counts_from_one() -> None:
    with pytest.raises(ValueError):
        resolve_attempt("t", Effect.READ, 0, Interrupted("x"))


# --- names ------------------------------------------------------------------------------------


@by_id("names")
def test_names(case: dict[str, Any]) -> None:
    fn = {
        "sanitize": sanitize,
        "exposed_tool_name": exposed_tool_name,
        "connector_tool_name": connector_tool_name,
    }
    name = fn[case["input"]["fn"]](**case["input"]["args"])
    assert name == case["expect"]["name"], case["rule"]
    assert len(name) <= 64
