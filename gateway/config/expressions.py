"""Policy conditions: CEL expressions (the `common-expression-language` library, Rust-backed),
compiled and checked once at load, evaluated per call (gateway/auth/policy.py).

The variables a condition sees (docs/policy.md):

    tool       the exposed tool name ("billing__refund")
    upstream   the tool's upstream ("" for a connector tool)
    arguments  the call's arguments (a map)
    principal  the caller's principal
    claims     the caller's verified token claims (a map; empty for a static token)
    scopes     the caller's token scopes (a list of strings)

At load a condition is refused with the reason when it does not parse, names a variable that is
none of these, or, evaluated once against empty sample values, meets an operation its types do
not allow (`tool > 5`) or gives something other than true or false (`tool`). The library has no
type checker: an expression that only fails on some call's values fails at run time, and the
policy then denies the call (fail closed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import cel

__all__ = ["VARIABLES", "Condition", "ExpressionError", "NotABool", "compile_condition", "error_kind"]

VARIABLES = frozenset({"tool", "upstream", "arguments", "principal", "claims", "scopes"})

# Values of the right type and no content: what a condition meets at load.
_SAMPLE: dict[str, Any] = {"tool": "", "upstream": "", "arguments": {}, "principal": "", "claims": {}, "scopes": []}
# `<input>:1:19:` in the library's parse errors: the expression's own line and column.
_POSITION = re.compile(r"<input>:(\d+):(\d+):")
_SYNTAX = re.compile(r"Syntax error: ([^\n]*)")
# The names a comprehension macro binds (`claims.groups.exists(g, g == "x")`): not variables. A
# text check that may over-collect (a string literal shaped like a macro), never under-collect a
# real binding, so a valid expression is never refused for it.
_BOUND = re.compile(r"\.\s*(?:all|exists|exists_one|map|filter)\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*,")
# `claims.groups`, `arguments["amount"]`, `has(claims.groups)`: the fields of a map a condition reads.
_FIELD = r"\s*(?:\.\s*([A-Za-z_][A-Za-z0-9_]*)|\[\s*(?:\"([^\"\\]*)\"|'([^'\\]*)')\s*\])"
_FIELDS = {name: (re.compile(rf"\b{name}\b"), re.compile(rf"\b{name}{_FIELD}")) for name in ("claims", "arguments")}


class ExpressionError(ValueError):
    """A condition that cannot be used: what is wrong, and where in the expression if known."""


class NotABool(TypeError):
    """A condition gave something other than true or false."""


@dataclass(frozen=True)
class Condition:
    """A compiled condition and what it reads (for listings: gateway/auth/policy.py)."""

    source: str
    program: cel.Program
    variables: frozenset[str]
    # The claim names it reads, or None when it reads claims in a way a text check cannot follow
    # (`claims[x]`, `claims` as a whole): then every claim counts.
    claim_names: frozenset[str] | None
    # The same for the arguments: only these are converted for an evaluation (None: all of them).
    argument_names: frozenset[str] | None

    def evaluate(self, context: "cel.Context") -> bool:
        """True or false; raises what the library raises, or NotABool for a result that is not a bool."""
        result = self.program.execute(context)
        if not isinstance(result, bool):
            raise NotABool(f"the condition gave {_type_name(result)}, not true or false")
        return result


def compile_condition(source: str) -> Condition:
    """The compiled condition, or ExpressionError saying what is wrong with it."""
    try:
        program = cel.compile(source)
    except ValueError as exc:
        raise ExpressionError(_syntax_message(str(exc))) from None
    bound = set(_BOUND.findall(source))
    names = set(program.variables()) - bound
    unknown = sorted(names - VARIABLES)
    if unknown:
        raise ExpressionError(
            f"unknown variable {', '.join(repr(n) for n in unknown)} in {source!r}: a condition sees only "
            f"{', '.join(sorted(VARIABLES))}")
    condition = Condition(source, program, frozenset(names & VARIABLES), _field_names(source, "claims"),
                          _field_names(source, "arguments"))
    _probe(condition)
    return condition


def _probe(condition: Condition) -> None:
    """Evaluate once against empty values of the right types: a type error or a result that is not
    a bool shows here; a missing key (`arguments.amount` of no arguments) is the call's to decide."""
    try:
        result = condition.program.execute(cel.Context(_SAMPLE))
    except KeyError:
        return
    except TypeError:
        raise ExpressionError(
            f"a value in {condition.source!r} has a type its operation does not take (CEL does not convert types: "
            "compare a string with a string, an int with an int, or convert with int(), double(), string())") from None
    except Exception:  # noqa: BLE001 - the library's other errors depend on the call's values: decided per call
        return
    if not isinstance(result, bool):
        raise ExpressionError(f"{condition.source!r} gives {_type_name(result)}, not true or false")


def _field_names(source: str, variable: str) -> frozenset[str] | None:
    """The fields of `variable` the condition reads, when every mention of it reads a named field
    (a mention in a string literal counts too: then None, never too few)."""
    word, field = _FIELDS[variable]
    fields = field.findall(source)
    if len(word.findall(source)) != len(fields):
        return None
    return frozenset(next((part for part in found if part), "") for found in fields)


def _syntax_message(text: str) -> str:
    position = _POSITION.search(text)
    syntax = _SYNTAX.search(text)
    what = syntax.group(1) if syntax else text.splitlines()[0]
    if position is None:
        return f"not a valid CEL expression: {what}"
    line, column = int(position.group(1)), int(position.group(2))
    where = f"column {column}" if line == 1 else f"line {line} of the expression, column {column}"
    return f"not a valid CEL expression ({where}): {what}"


def error_kind(exc: BaseException) -> str:
    """What went wrong in an evaluation, in words that carry no value of the call (for the log)."""
    if isinstance(exc, KeyError):
        return "a key it reads is missing"
    if isinstance(exc, TypeError):
        return str(exc) if isinstance(exc, NotABool) else "a value has a type its operation does not take"
    if isinstance(exc, ZeroDivisionError):
        return "division by zero"
    return f"evaluation failed ({type(exc).__name__})"


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {str: "a string", int: "an int", float: "a double", dict: "a map", list: "a list",
            bytes: "bytes"}.get(type(value), f"a {type(value).__name__}")
