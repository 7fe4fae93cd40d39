"""The fixtures the MCP conformance suites call on a server: tool, resource and prompt
definitions and the input requests of the multi-round-trip tools, as wire dicts.

Used by `reference_server.py` (imported as a sibling of that script). Names and texts follow
the scenario descriptions of `@modelcontextprotocol/conformance` 0.1.16 and 0.2.0-alpha.12.
"""

from __future__ import annotations

from typing import Any

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
WAV = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="
EMPTY: dict[str, Any] = {"type": "object", "properties": {}}


def tool(name: str, description: str, schema: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"name": name, "description": description, "inputSchema": schema or EMPTY, **extra}


def text(value: str, *, error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}], "isError": error}


JSON_SCHEMA_2020_12: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {"address": {"$anchor": "addressDef", "type": "object",
                          "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
    "properties": {
        "name": {"type": "string"}, "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"}, "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}

# Tools of the handshake-era scenarios (0.1.16 and the 2025-11-25 requirement set). The ones
# that ask the client (sampling, elicitation) ask on the session on the handshake era and
# answer `input_required` on 2026-07-28.
TOOLS: list[dict[str, Any]] = [
    tool("test_simple_text", "Returns simple text content"),
    tool("test_image_content", "Returns image content"),
    tool("test_audio_content", "Returns audio content"),
    tool("test_embedded_resource", "Returns an embedded resource"),
    tool("test_multiple_content_types", "Returns text, image and resource"),
    tool("test_tool_with_logging", "Sends three log messages while running"),
    tool("test_tool_with_progress", "Sends progress notifications"),
    tool("test_error_handling", "Always fails with isError"),
    tool("test_reconnection", "Closes its SSE stream mid-call (SEP-1699)"),
    tool("test_sampling", "Asks the client for an LLM completion",
         {"type": "object", "properties": {"prompt": {"type": "string"}}, "required": ["prompt"]}),
    tool("test_elicitation", "Asks the user for input",
         {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}),
    tool("test_elicitation_sep1034_defaults", "Elicitation with defaults (SEP-1034)"),
    tool("test_elicitation_sep1330_enums", "Elicitation with enum forms (SEP-1330)"),
    tool("json_schema_2020_12_tool", "Tool with JSON Schema 2020-12 features", JSON_SCHEMA_2020_12),
    # 2026-07-28 scenarios (server-stateless, input-required-result-*, custom headers).
    tool("test_missing_capability", "Needs the client's sampling capability (-32021 without it)"),
    tool("test_streaming_elicitation", "Asks for input (input_required on 2026-07-28)"),
    tool("test_logging_tool", "Logs at every level while running"),
    tool("test_trigger_tool_change", "Adds or removes the tool test_dynamic_tool (a tools list change)"),
    tool("test_trigger_prompt_change", "Adds or removes the prompt test_dynamic_prompt (a prompts list change)"),
    tool("test_trigger_resource_update", "Says that a resource changed (notifications/resources/updated)",
         {"type": "object", "properties": {"uri": {"type": "string"}}}),
    tool("test_protocol", "Says which protocol version the request came in"),
    tool("test_custom_header_tool", "Mirrors its `region` argument in the Mcp-Param-Region header (SEP-2243)",
         {"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
          "required": ["region"]}),
    tool("test_input_required_result_elicitation", "Asks for a name, then greets"),
    tool("test_input_required_result_sampling", "Asks the client's model a question"),
    tool("test_input_required_result_list_roots", "Asks for the client's roots"),
    tool("test_input_required_result_request_state", "Round-trips its requestState"),
    tool("test_input_required_result_multiple_inputs", "Asks three questions at once"),
    tool("test_input_required_result_multi_round", "Asks two questions, one round each"),
    tool("test_input_required_result_tampered_state", "Rejects a tampered requestState"),
    tool("test_input_required_result_capabilities", "Asks only what the client declared it can answer"),
]
DYNAMIC_TOOL = tool("test_dynamic_tool", "Present after an odd number of test_trigger_tool_change calls")

RESOURCES: list[dict[str, Any]] = [
    {"uri": "test://static-text", "name": "static-text", "title": "Static Text Resource", "mimeType": "text/plain"},
    {"uri": "test://static-binary", "name": "static-binary", "title": "Static Binary Resource", "mimeType": "image/png"},
    {"uri": "test://watched-resource", "name": "watched-resource", "title": "Watched Resource", "mimeType": "text/plain"},
]
TEMPLATES: list[dict[str, Any]] = [
    {"uriTemplate": "test://template/{id}/data", "name": "template", "title": "Resource Template",
     "mimeType": "application/json"},
]
PROMPTS: list[dict[str, Any]] = [
    {"name": "test_simple_prompt", "description": "A prompt without arguments"},
    {"name": "test_prompt_with_arguments", "description": "A prompt with two required arguments",
     "arguments": [{"name": "arg1", "description": "First argument", "required": True},
                   {"name": "arg2", "description": "Second argument", "required": True}]},
    {"name": "test_prompt_with_embedded_resource", "description": "A prompt embedding a resource",
     "arguments": [{"name": "resourceUri", "description": "URI of the resource to embed", "required": True}]},
    {"name": "test_prompt_with_image", "description": "A prompt with an image"},
    {"name": "test_input_required_result_prompt", "description": "Asks for context before it is built"},
]
DYNAMIC_PROMPT = {"name": "test_dynamic_prompt", "description": "Present after an odd number of test_trigger_prompt_change calls"}


def read_resource(uri: str) -> dict[str, Any] | None:
    """The `contents` entry of a resource, or None for a URI the server does not serve."""
    if uri == "test://static-text":
        return {"uri": uri, "mimeType": "text/plain", "text": "This is the content of the static text resource."}
    if uri == "test://static-binary":
        return {"uri": uri, "mimeType": "image/png", "blob": PNG}
    if uri == "test://watched-resource":
        return {"uri": uri, "mimeType": "text/plain", "text": "Watched resource content"}
    prefix, suffix = "test://template/", "/data"
    if uri.startswith(prefix) and uri.endswith(suffix) and "/" not in uri[len(prefix):-len(suffix)]:
        ident = uri[len(prefix):-len(suffix)]
        return {"uri": uri, "mimeType": "application/json",
                "text": '{"id":"%s","templateTest":true,"data":"Data for ID: %s"}' % (ident, ident)}
    return None


def prompt_messages(name: str, arguments: dict[str, str]) -> list[dict[str, Any]] | None:
    def user(content: dict[str, Any]) -> dict[str, Any]:
        return {"role": "user", "content": content}

    if name == "test_simple_prompt":
        return [user({"type": "text", "text": "This is a simple prompt for testing."})]
    if name == "test_prompt_with_arguments":
        return [user({"type": "text", "text": f"Prompt with arguments: arg1='{arguments.get('arg1')}', "
                                              f"arg2='{arguments.get('arg2')}'"})]
    if name == "test_prompt_with_embedded_resource":
        return [user({"type": "resource", "resource": {"uri": arguments.get("resourceUri", "test://embedded"),
                                                       "mimeType": "text/plain",
                                                       "text": "Embedded resource content for testing."}}),
                user({"type": "text", "text": "Please process the embedded resource above."})]
    if name == "test_prompt_with_image":
        return [user({"type": "image", "data": PNG, "mimeType": "image/png"}),
                user({"type": "text", "text": "Please analyze the image above."})]
    if name == "test_dynamic_prompt":
        return [user({"type": "text", "text": "A prompt that comes and goes."})]
    return None


# -- what the tools ask the client ---------------------------------------------------------------

def elicit(message: str, properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required is not None:
        schema["required"] = required
    return {"method": "elicitation/create", "params": {"mode": "form", "message": message, "requestedSchema": schema}}


def sample(prompt: str, max_tokens: int = 100) -> dict[str, Any]:
    return {"method": "sampling/createMessage",
            "params": {"messages": [{"role": "user", "content": {"type": "text", "text": prompt}}], "maxTokens": max_tokens}}


ROOTS = {"method": "roots/list", "params": {}}

SEP1034_SCHEMA: dict[str, Any] = {
    "name": {"type": "string", "description": "User name", "default": "John Doe"},
    "age": {"type": "integer", "description": "User age", "default": 30},
    "score": {"type": "number", "description": "User score", "default": 95.5},
    "status": {"type": "string", "description": "User status", "enum": ["active", "inactive", "pending"], "default": "active"},
    "verified": {"type": "boolean", "description": "Verification status", "default": True},
}
SEP1330_SCHEMA: dict[str, Any] = {
    "untitledSingle": {"type": "string", "description": "Select one option", "enum": ["option1", "option2", "option3"]},
    "titledSingle": {"type": "string", "description": "Select one option with titles",
                     "oneOf": [{"const": "value1", "title": "First Option"}, {"const": "value2", "title": "Second Option"},
                               {"const": "value3", "title": "Third Option"}]},
    "legacyEnum": {"type": "string", "description": "Select one option (legacy)", "enum": ["opt1", "opt2", "opt3"],
                   "enumNames": ["Option One", "Option Two", "Option Three"]},
    "untitledMulti": {"type": "array", "description": "Select multiple options", "minItems": 1, "maxItems": 3,
                      "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
    "titledMulti": {"type": "array", "description": "Select multiple options with titles", "minItems": 1, "maxItems": 3,
                    "items": {"anyOf": [{"const": "value1", "title": "First Choice"},
                                        {"const": "value2", "title": "Second Choice"},
                                        {"const": "value3", "title": "Third Choice"}]}},
}

NAME = elicit("What is your name?", {"name": {"type": "string"}}, ["name"])


def questions(tool_name: str, arguments: dict[str, Any], round_: int) -> dict[str, dict[str, Any]] | None:
    """The input requests a tool makes in round `round_` (0 = the first call), or None when it is done.

    One table for both eras: on 2026-07-28 they become `inputRequests`, on the handshake era
    server-to-client requests on the session.
    """
    single: dict[str, dict[str, dict[str, Any]]] = {
        "test_sampling": {"sampling": sample(str(arguments.get("prompt", "")))},
        "test_elicitation": {"response": elicit(str(arguments.get("message", "")),
                                                {"response": {"type": "string", "description": "User's response"}},
                                                ["response"])},
        "test_elicitation_sep1034_defaults": {"form": elicit("Please review and update the form fields with defaults",
                                                             SEP1034_SCHEMA, [])},
        "test_elicitation_sep1330_enums": {"form": elicit("Please select options from the enum fields", SEP1330_SCHEMA, [])},
        "test_streaming_elicitation": {"answer": elicit("Anything to add?", {"answer": {"type": "string"}})},
        "test_input_required_result_elicitation": {"user_name": NAME},
        "test_input_required_result_sampling": {"capital_question": sample("What is the capital of France?")},
        "test_input_required_result_list_roots": {"client_roots": ROOTS},
        "test_input_required_result_request_state": {
            "confirm": elicit("Please confirm", {"ok": {"type": "boolean"}}, ["ok"])},
        "test_input_required_result_tampered_state": {
            "confirm": elicit("Please confirm", {"ok": {"type": "boolean"}}, ["ok"])},
        "test_input_required_result_multiple_inputs": {
            "user_name": NAME, "greeting": sample("Generate a greeting", 50), "client_roots": ROOTS},
    }
    if tool_name in single:
        return single[tool_name] if round_ == 0 else None
    if tool_name == "test_input_required_result_multi_round":
        steps = [{"step1": elicit("Step 1: What is your name?", {"name": {"type": "string"}}, ["name"])},
                 {"step2": elicit("Step 2: What is your favorite color?", {"color": {"type": "string"}}, ["color"])}]
        return steps[round_] if round_ < len(steps) else None
    return None
