"""The model's arguments checked against a tool's JSON Schema before the call runs."""

from __future__ import annotations

from typing import Any

import jsonschema


def check_arguments(schema: dict[str, Any], arguments: dict[str, Any]) -> str | None:
    """None when the arguments fit the schema, else the reason (the model reads it)."""
    try:
        jsonschema.validate(arguments, schema)
    except jsonschema.ValidationError as exc:
        return str(exc.message)
    except jsonschema.SchemaError:
        # A schema we cannot read is the gateway's problem to report; let the call decide.
        return None
    return None
