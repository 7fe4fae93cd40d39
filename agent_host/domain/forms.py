"""Form questions: an upstream's elicitation (form mode) asks for a flat object of primitive fields.

MCP (2025-11-25) restricts a form's `requestedSchema` to an object whose properties are strings
(optionally with `format`, `minLength`, `maxLength`), numbers or integers (`minimum`,
`maximum`), booleans, single-select enums (`enum`, with `enumNames`, or `oneOf` of
`{const, title}`) and multi-select enums (an array whose `items` are an `enum` or an `anyOf` of
`{const, title}`). `form_fields` reads such a schema (FormError for anything else, so the host declines
what it cannot show), `check_form` checks an answer against the schema the upstream sent, and
`field_value` turns a typed line (the terminal) into the field's JSON value.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import jsonschema
from pydantic import BaseModel

__all__ = ["FormError", "FormField", "check_form", "field_value", "form_fields"]

FieldType = Literal["string", "number", "integer", "boolean", "array"]
_TYPES = ("string", "number", "integer", "boolean", "array")


class FormError(ValueError):
    """The form cannot be shown, or an answer does not fit it: the text says what and where."""


class FormField(BaseModel):
    name: str
    type: FieldType
    title: str | None = None
    description: str | None = None
    required: bool = False
    enum: list[str] | None = None  # the values to pick from (a multi-select: several, for an array)
    enum_titles: list[str] | None = None  # what to show for each value, when the form names them
    default: Any = None


def form_fields(schema: dict[str, Any] | None) -> list[FormField]:
    """The fields of a requested schema, in its order; FormError when it is not a flat form."""
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        raise FormError("the requested schema is not an object")
    properties = schema.get("properties") or {}
    if not isinstance(properties, dict):
        raise FormError("the requested schema's properties are not an object")
    required = set(schema.get("required") or [])
    fields: list[FormField] = []
    for name, spec in properties.items():
        if not isinstance(spec, dict) or spec.get("type") not in _TYPES:
            raise FormError(f"field {name!r}: only string, number, integer, boolean and enum fields can be asked")
        enum, titles = _choices(str(name), spec.get("items") if spec["type"] == "array" else spec)
        if spec["type"] == "array" and enum is None:
            raise FormError(f"field {name!r}: an array field must be a multi-select enum")
        fields.append(FormField(
            name=str(name), type=spec["type"], title=_str(spec.get("title")), description=_str(spec.get("description")),
            required=name in required, enum=enum, enum_titles=titles, default=spec.get("default"),
        ))
    return fields


def _choices(name: str, spec: Any) -> tuple[list[str] | None, list[str] | None]:
    """(values, titles) of an enum: `enum` (+ `enumNames`), or `oneOf` / `anyOf` of `{const, title}`."""
    if not isinstance(spec, dict):
        return None, None
    if "enum" in spec:
        enum, names = spec["enum"], spec.get("enumNames")
        if not (isinstance(enum, list) and all(isinstance(e, str) for e in enum)):
            raise FormError(f"field {name!r}: enum must be a list of strings")
        titles = names if isinstance(names, list) and len(names) == len(enum) and all(isinstance(n, str) for n in names) else None
        return enum, titles
    for key in ("oneOf", "anyOf"):
        options = spec.get(key)
        if options is not None:
            if not (isinstance(options, list) and all(isinstance(o, dict) and isinstance(o.get("const"), str) for o in options)):
                raise FormError(f"field {name!r}: {key} must list {{const, title}} options")
            return [o["const"] for o in options], [str(o.get("title") or o["const"]) for o in options]
    return None, None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def check_form(schema: dict[str, Any], content: Any) -> str | None:
    """None when `content` answers the form, else what is wrong (shown to the user)."""
    if not isinstance(content, dict):
        return "the answer to a form is an object of its fields"
    try:
        fields = {f.name for f in form_fields(schema)}
    except FormError as exc:
        return str(exc)
    unknown = sorted(set(content) - fields)
    if unknown:
        return f"the form has no field {unknown[0]!r}"
    try:
        jsonschema.validate(content, schema)
    except jsonschema.ValidationError as exc:
        where = ".".join(str(p) for p in exc.absolute_path)
        return f"field {where!r}: {exc.message}" if where else str(exc.message)
    except jsonschema.SchemaError as exc:
        return f"the requested schema is not valid: {exc.message}"
    return None


def field_value(field: FormField, text: str) -> Any:
    """A typed line as the field's value; FormError (saying what is expected) when it is not one."""
    text = text.strip()
    if field.type == "boolean":
        lowered = text.lower()
        if lowered in ("y", "yes", "true", "1"):
            return True
        if lowered in ("n", "no", "false", "0"):
            return False
        raise FormError(f"{field.name}: answer yes or no")
    if field.type in ("number", "integer"):
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (field.type == "integer" and not isinstance(value, int)):
            raise FormError(f"{field.name}: expected {'an integer' if field.type == 'integer' else 'a number'}")
        return value
    if field.type == "array":
        return [_pick(field, part.strip()) for part in text.split(",") if part.strip()]
    return _pick(field, text)


def _pick(field: FormField, text: str) -> str:
    """A choice by its number (1-based) or its value or title; free text when the field has none."""
    if not field.enum:
        return text
    if text.isdigit() and 1 <= int(text) <= len(field.enum):
        return field.enum[int(text) - 1]
    if text in field.enum:
        return text
    if field.enum_titles and text in field.enum_titles:
        return field.enum[field.enum_titles.index(text)]
    raise FormError(f"{field.name}: pick one of the choices (by number)")
