"""The reviewer's inputSchema: refuse what the gateway cannot check, then check arguments.

Arguments are validated with JSON Schema 2020-12 (jsonschema's Draft202012Validator, with its
format checker). A keyword that validator would silently ignore (a typo, a vendor extension,
a draft-07 `dependencies`, a remote `$ref`, a `format` it has no checker for) would let bad
arguments reach the connector while the reviewer believes they are checked, so such a schema
is refused instead.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError

# Keywords whose value is one subschema / a map of subschemas / a list of subschemas.
_ONE_SCHEMA = frozenset(
    {"not", "if", "then", "else", "items", "additionalProperties", "contains", "propertyNames",
     "unevaluatedItems", "unevaluatedProperties"}
)
_SCHEMA_MAP = frozenset({"properties", "patternProperties", "dependentSchemas", "$defs", "definitions"})
_SCHEMA_LIST = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
# Keywords the 2020-12 validator checks, whose value is data (not recursed into).
_ASSERTIONS = frozenset(
    {"type", "enum", "const", "required", "minimum", "maximum", "exclusiveMinimum",
     "exclusiveMaximum", "multipleOf", "minLength", "maxLength", "pattern", "minItems",
     "maxItems", "uniqueItems", "minProperties", "maxProperties", "dependentRequired",
     "minContains", "maxContains", "format", "$ref"}
)
# Annotations: they change no verdict, so they are harmless.
_ANNOTATIONS = frozenset(
    {"title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly",
     "$comment", "contentMediaType", "contentEncoding"}
)
_ROOT_ONLY = frozenset({"$schema"})
SCHEMA_2020_12 = "https://json-schema.org/draft/2020-12/schema"
CHECKED_FORMATS = frozenset(Draft202012Validator.FORMAT_CHECKER.checkers)


class UncheckableSchema(ValueError):
    """An inputSchema the gateway refuses; `key` is the dotted path under inputSchema."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def check_input_schema(schema: Mapping[str, Any]) -> None:
    """Raise UncheckableSchema unless every keyword in `schema` is one the gateway checks."""
    if schema.get("type") != "object":
        raise UncheckableSchema("inputSchema.type", 'must be "object": tool arguments are a JSON object')
    if "$schema" in schema and schema["$schema"].rstrip("#") != SCHEMA_2020_12:
        raise UncheckableSchema(
            "inputSchema.$schema", f"the gateway checks JSON Schema 2020-12 ({SCHEMA_2020_12}) only"
        )
    for path, keyword, value in _keywords(schema, ("inputSchema",), root=True):
        key = ".".join((*path, keyword))
        if keyword == "format" and value not in CHECKED_FORMATS:
            raise UncheckableSchema(
                key, f"format {value!r} cannot be checked (checked formats: {', '.join(sorted(CHECKED_FORMATS))})"
            )
        if keyword == "$ref" and not (isinstance(value, str) and value.startswith("#")):
            raise UncheckableSchema(key, "only local references (#/...) can be checked")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = ".".join(["inputSchema", *(str(p) for p in exc.path)])
        raise UncheckableSchema(where, f"not a valid JSON Schema: {exc.message}") from None


def _keywords(schema: Any, path: tuple[str, ...], *, root: bool) -> Iterator[tuple[tuple[str, ...], str, Any]]:
    if isinstance(schema, bool):
        return
    if not isinstance(schema, Mapping):
        raise UncheckableSchema(".".join(path), "a schema must be an object or a boolean")
    for keyword, value in schema.items():
        if keyword in _ROOT_ONLY and root:
            continue
        if keyword not in _ONE_SCHEMA | _SCHEMA_MAP | _SCHEMA_LIST | _ASSERTIONS | _ANNOTATIONS:
            raise UncheckableSchema(
                ".".join((*path, keyword)), f"keyword {keyword!r} cannot be checked by the gateway"
            )
        yield path, keyword, value
        here = (*path, keyword)
        if keyword in _ONE_SCHEMA:
            yield from _keywords(value, here, root=False)
        elif keyword in _SCHEMA_MAP and isinstance(value, Mapping):
            for name, sub in value.items():
                yield from _keywords(sub, (*here, str(name)), root=False)
        elif keyword in _SCHEMA_LIST and isinstance(value, list):
            for index, sub in enumerate(value):
                yield from _keywords(sub, (*here, str(index)), root=False)


class ArgumentChecker:
    """A compiled inputSchema: `violations(arguments)` lists what is wrong, empty when valid."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self._validator = Draft202012Validator(dict(schema), format_checker=Draft202012Validator.FORMAT_CHECKER)

    def violations(self, arguments: Any, limit: int = 5) -> list[str]:
        errors = sorted(self._validator.iter_errors(arguments), key=lambda e: (list(map(str, e.path)), e.message))
        return [_describe(e) for e in errors[:limit]]


def _describe(error: ValidationError) -> str:
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{where or '(arguments)'}: {error.message}"
