"""What the gateway accepts in an inputSchema, and how it reports argument violations."""

from __future__ import annotations

import pytest

from gateway.connectors.input_schema import ArgumentChecker, UncheckableSchema, check_input_schema

RICH = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "title": "Refund",
    "properties": {
        "email": {"type": "string", "format": "email"},
        "items": {"type": "array", "items": {"$ref": "#/$defs/item"}, "minItems": 1, "uniqueItems": True},
        "mode": {"enum": ["a", "b"], "default": "a"},
        "n": {"anyOf": [{"type": "integer", "multipleOf": 5}, {"const": 1}]},
    },
    "required": ["email"],
    "additionalProperties": False,
    "if": {"properties": {"mode": {"const": "b"}}, "required": ["mode"]}, "then": {"required": ["n"]},
    "$defs": {"item": {"type": "object", "properties": {"sku": {"type": "string", "pattern": "^[A-Z]+$"}}}},
}


def test_rich_schema_is_checkable() -> None:
    check_input_schema(RICH)
    checker = ArgumentChecker(RICH)
    assert checker.violations({"email": "a@example.com", "items": [{"sku": "AB"}]}) == []
    problems = checker.violations({"email": "nope", "items": [{"sku": "ab"}], "mode": "b", "x": 1})
    joined = "; ".join(problems)
    assert "email: 'nope' is not a 'email'" in joined
    assert "items/0/sku: 'ab' does not match" in joined
    assert "Additional properties are not allowed ('x' was unexpected)" in joined
    assert "'n' is a required property" in joined


@pytest.mark.parametrize("schema, key", [
    ({"type": "object", "properties": {"a": {"type": "string", "x-nullable": True}}}, "inputSchema.properties.a.x-nullable"),
    ({"type": "object", "$schema": "http://json-schema.org/draft-07/schema#"}, "inputSchema.$schema"),
    ({"type": "object", "properties": {"a": {"$dynamicRef": "#x"}}}, "inputSchema.properties.a.$dynamicRef"),
    ({"type": "object", "allOf": [{"discriminator": {}}]}, "inputSchema.allOf.0.discriminator"),
])
def test_uncheckable(schema: dict, key: str) -> None:
    with pytest.raises(UncheckableSchema) as caught:
        check_input_schema(schema)
    assert caught.value.key == key
