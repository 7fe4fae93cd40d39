"""The Dex connector manifest as the gateway reads it, and the reviewer's additions.

`parse_manifest` is strict on what the gateway uses (metadata.name, each operation's name,
kind, branches, execution, and the reviewer's `agent` block and `inputSchema`) and tolerant
of the rest (auth, studio, codegen, triggers...), which varies between connector versions.

Required and optional branches: a branch with `optional: true` is optional and every other
branch is a required (success) branch. Older manifests carry no `optional` flag at all; in
one of those the first branch of each operation is its success branch and the rest count as
optional. `defect` and `uncertain` are never success branches, whatever the flags say.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import anyio
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError
from pydantic import BaseModel, ConfigDict

from ..conventions.keys import Effect
from ..conventions.naming import connector_tool_name
from ..conventions.outcomes import attempts_for
from ..config.durations import parse_duration
from ..protocol import JsonSchema
from ..config.yaml_source import DEFAULT_LIMITS, KeyPath, SourceError, SourcedDocument, SourceLimits, load_file, load_source
from .errors import ManifestError
from .input_schema import UncheckableSchema, check_input_schema

API_VERSION = "connectors.dex.dev/v1alpha1"
MANIFEST_FILENAMES = ("connector.yaml", "connector.yml", "dex-connector.json")
DEFAULT_TIMEOUT_SECONDS = 60.0
NEVER_SUCCESS = frozenset({"defect", "uncertain"})
AGENT_KEYS = ("exposed", "approval", "retry", "branches")

BranchListing = Literal["rejected", "unknown"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RetryPolicy(_Frozen):
    initial_interval: float = 1.0
    backoff_coefficient: float = 2.0
    maximum_interval: float | None = None
    maximum_attempts: int = 0  # 0: unlimited in the manifest's terms; the gateway caps at 3
    total_duration: float | None = None

    def delay_before(self, attempt: int) -> float:
        """Seconds to wait before attempt number `attempt` (2, 3, ...)."""
        delay = self.initial_interval * self.backoff_coefficient ** max(0, attempt - 2)
        return min(delay, self.maximum_interval) if self.maximum_interval is not None else delay


class Execution(_Frozen):
    timeout: float = DEFAULT_TIMEOUT_SECONDS
    retry: RetryPolicy = RetryPolicy()


class AgentBlock(_Frozen):
    exposed: bool = False
    approval: Literal["recommended"] | None = None
    retry: Literal["safe"] | None = None
    branches: dict[str, BranchListing] = {}


class Operation(_Frozen):
    name: str
    kind: Literal["query", "mutation"]
    description: str = ""
    idempotency: str | None = None
    branches: tuple[str, ...]
    success_branches: frozenset[str]
    optional_branches: frozenset[str]
    optional_flags: bool  # whether the manifest marks optional branches itself
    execution: Execution = Execution()
    agent: AgentBlock | None = None
    input_schema: JsonSchema | None = None
    line: int | None = None

    @property
    def is_mutation(self) -> bool:
        return self.kind == "mutation"

    @property
    def exposed(self) -> bool:
        return self.agent is not None and self.agent.exposed

    @property
    def effect(self) -> Effect:
        if not self.is_mutation:
            return Effect.READ
        if self.agent is not None and self.agent.retry == "safe":
            return Effect.IDEMPOTENT_WRITE
        return Effect.NON_IDEMPOTENT_WRITE

    @property
    def requires_approval(self) -> bool:
        return self.agent is not None and self.agent.approval == "recommended"

    @property
    def listing(self) -> Mapping[str, BranchListing]:
        return self.agent.branches if self.agent is not None else {}

    @property
    def max_attempts(self) -> int:
        """Attempts per call: the manifest's retry policy, at most 3, for reads and safe
        mutations; one for every other mutation."""
        cap = attempts_for(self.effect)
        wanted = self.execution.retry.maximum_attempts
        return cap if wanted <= 0 else min(wanted, cap)


class Manifest(_Frozen):
    connector_id: str
    display_name: str | None = None
    description: str | None = None
    file: str
    operations: tuple[Operation, ...]

    @property
    def exposed_operations(self) -> tuple[Operation, ...]:
        return tuple(op for op in self.operations if op.exposed)

    def tool_name(self, operation: Operation) -> str:
        return connector_tool_name(self.connector_id, operation.name)

    def operation(self, name: str) -> Operation:
        for op in self.operations:
            if op.name == name:
                return op
        raise KeyError(name)


def load_manifest(path: str | Path, limits: SourceLimits = DEFAULT_LIMITS) -> Manifest:
    """Read and validate the manifest at `path` (YAML, or JSON for `*.json`)."""
    try:
        doc = load_file(path, limits)
    except SourceError as exc:
        raise ManifestError(exc.problem, file=str(path), line=exc.line) from None
    return _validated(doc)


def parse_manifest(text: str, filename: str, limits: SourceLimits = DEFAULT_LIMITS) -> Manifest:
    """Validate manifest `text`; `filename` names it in errors and picks JSON or YAML."""
    try:
        doc = load_source(text, filename, limits)
    except SourceError as exc:
        raise ManifestError(exc.problem, file=filename, line=exc.line) from None
    return _validated(doc)


def _validated(doc: SourcedDocument) -> Manifest:
    _check_schema(doc)
    return _build(doc)


async def parse_manifest_off_loop(text: str, filename: str, limits: SourceLimits = DEFAULT_LIMITS) -> Manifest:
    """`parse_manifest` in a worker thread, within the limits' time budget, so the event loop
    (health checks, calls) keeps running while a large or hostile manifest is read. The
    loader stops itself at the budget too; the timeout here is the backstop."""
    budget = limits.time_budget_seconds
    try:
        with anyio.fail_after(budget + 1):
            return await anyio.to_thread.run_sync(parse_manifest, text, filename, limits, abandon_on_cancel=True)
    except TimeoutError:
        raise ManifestError(f"reading took longer than the time budget of {budget:g} s", file=filename) from None


@cache
def manifest_schema() -> JsonSchema:
    """The JSON Schema of the manifest, kept as JSON in the package."""
    schema: JsonSchema = json.loads(resources.files(__package__).joinpath("manifest.schema.json").read_text("utf-8"))
    return schema


def _check_schema(doc: SourcedDocument) -> None:
    validator = Draft202012Validator(manifest_schema())
    errors = list(validator.iter_errors(doc.data))
    if not errors:
        return
    # The error that comes first in the file, so a reviewer fixes them top to bottom.
    first = min(errors, key=lambda e: (doc.line(tuple(e.absolute_path)) or 0, len(e.absolute_path)))
    raise _schema_error(first, doc)


def _schema_error(error: ValidationError, doc: SourcedDocument) -> ManifestError:
    path: KeyPath = tuple(error.absolute_path)
    operation, key_path = _split_operation(path, doc.data)
    message = error.message
    if error.validator == "additionalProperties" and isinstance(error.instance, Mapping):
        known = set(error.schema.get("properties", {}))
        extra = sorted(k for k in error.instance if k not in known)
        if extra:
            key_path = (*key_path, extra[0])
            path = (*path, extra[0])
            message = f"unknown key (allowed: {', '.join(sorted(known, key=_agent_order))})"
            if key_path[:1] == ("agent",):
                message = f"unknown agent key {extra[0]!r} (allowed: {', '.join(AGENT_KEYS)})"
    elif error.validator == "required" and isinstance(error.instance, Mapping):
        missing = [k for k in error.validator_value if k not in error.instance]
        if missing:
            key_path = (*key_path, missing[0])
            message = "required key is missing"
    elif error.validator in ("enum", "const"):
        allowed = error.validator_value if error.validator == "enum" else [error.validator_value]
        noun = "agent value" if key_path[:1] == ("agent",) else "value"
        message = f"unknown {noun} {error.instance!r} (allowed: {', '.join(map(repr, allowed))})"
    key = ".".join(str(p) for p in key_path) or None
    return ManifestError(message, file=doc.source, operation=operation, key=key, line=doc.line(path))


def _agent_order(key: str) -> int:
    return AGENT_KEYS.index(key) if key in AGENT_KEYS else len(AGENT_KEYS)


def _split_operation(path: KeyPath, data: Any) -> tuple[str | None, KeyPath]:
    """(operation name, path inside the operation) for a path under spec.operations[i]."""
    if len(path) >= 3 and path[:2] == ("spec", "operations") and isinstance(path[2], int):
        try:
            name = data["spec"]["operations"][path[2]].get("name")
        except (KeyError, IndexError, TypeError, AttributeError):
            name = None
        return (name if isinstance(name, str) else f"#{path[2]}"), path[3:]
    return None, path


def _build(doc: SourcedDocument) -> Manifest:
    data, file = doc.data, doc.source
    metadata = data["metadata"]
    connector_id: str = metadata["name"]
    operations: list[Operation] = []
    seen_ops: set[str] = set()
    tool_names: dict[str, str] = {}
    for index, raw in enumerate(data["spec"]["operations"]):
        base: KeyPath = ("spec", "operations", index)

        def fail(message: str, key: str, sub: KeyPath = (), *, _base: KeyPath = base, _name: str = raw["name"]) -> ManifestError:
            return ManifestError(message, file=file, operation=_name, key=key, line=doc.line((*_base, *sub)))

        name = raw["name"]
        if name in seen_ops:
            raise fail("two operations have this name", "name", ("name",))
        seen_ops.add(name)
        op = _operation(raw, doc.line(base), fail)
        if op.exposed:
            tool = connector_tool_name(connector_id, name)
            if tool in tool_names:
                raise fail(f"duplicate tool name {tool!r} (operation {tool_names[tool]!r} has it too)", "name", ("name",))
            tool_names[tool] = name
        operations.append(op)
    return Manifest(
        connector_id=connector_id,
        display_name=metadata.get("displayName"),
        description=metadata.get("description"),
        file=file,
        operations=tuple(operations),
    )


def _operation(raw: Mapping[str, Any], line: int | None, fail: Any) -> Operation:
    branch_ids: list[str] = []
    for i, branch in enumerate(raw["branches"]):
        if branch["id"] in branch_ids:
            raise fail(f"branch {branch['id']!r} is declared twice", f"branches.{branch['id']}", ("branches", i))
        branch_ids.append(branch["id"])
    flags = any("optional" in b for b in raw["branches"])
    if flags:
        optional = {b["id"] for b in raw["branches"] if b.get("optional") is True}
    else:
        # An older manifest without any optional flag: the first branch is the success one.
        optional = set(branch_ids[1:])
    required = {b for b in branch_ids if b not in optional}
    kind = raw["kind"]
    agent = AgentBlock(**raw["agent"]) if "agent" in raw else None
    if agent is not None:
        if agent.retry == "safe" and kind == "query":
            raise fail("retry: safe is for mutations only (a query is a read and is retried anyway)", "agent.retry", ("agent", "retry"))
        for branch, listing in agent.branches.items():
            sub = ("agent", "branches", branch)
            if branch not in optional:
                what = "a required (success) branch" if branch in required else "not a branch of the operation"
                raise fail(
                    f"{branch!r} is {what}; agent.branches lists optional branches only "
                    f"(optional here: {', '.join(b for b in branch_ids if b in optional) or 'none'})",
                    f"agent.branches.{branch}", sub,
                )
            if listing == "unknown" and kind == "query":
                raise fail("a query changes nothing, so its branch cannot be unknown (use rejected, or leave it out)", f"agent.branches.{branch}", sub)
    schema = raw.get("inputSchema")
    if schema is not None:
        try:
            check_input_schema(schema)
        except UncheckableSchema as exc:
            raise fail(str(exc), exc.key, tuple(int(p) if p.isdigit() else p for p in exc.key.split("."))) from None
    exposed = agent is not None and agent.exposed
    if exposed and schema is None:
        raise fail("an exposed operation needs an inputSchema (JSON Schema of its input), added by the reviewer", "inputSchema")
    if exposed and not (required - NEVER_SUCCESS):
        raise fail("an exposed operation needs a required (success) branch", "branches", ("branches",))
    return Operation(
        name=raw["name"],
        kind=kind,
        description=raw.get("description", ""),
        idempotency=raw.get("idempotency"),
        branches=tuple(branch_ids),
        success_branches=frozenset(required - NEVER_SUCCESS),
        optional_branches=frozenset(optional),
        optional_flags=flags,
        execution=_execution(raw.get("execution") or {}),
        agent=agent,
        input_schema=schema,
        line=line,
    )


def _execution(raw: Mapping[str, Any]) -> Execution:
    retry_raw = raw.get("retry") or {}
    retry = RetryPolicy(
        initial_interval=parse_duration(retry_raw.get("initialInterval", "1s")),
        backoff_coefficient=float(retry_raw.get("backoffCoefficient", 2.0)),
        maximum_interval=parse_duration(retry_raw["maximumInterval"]) if "maximumInterval" in retry_raw else None,
        maximum_attempts=int(retry_raw.get("maximumAttempts", 0)),
        total_duration=parse_duration(retry_raw["totalDuration"]) if "totalDuration" in retry_raw else None,
    )
    timeout = parse_duration(raw["executeMethodTimeout"]) if "executeMethodTimeout" in raw else DEFAULT_TIMEOUT_SECONDS
    return Execution(timeout=timeout, retry=retry)
