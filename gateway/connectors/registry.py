"""The registered connectors: the config directory's, and the admin API's (in the database).

`tools()` is what every tools/list reads, so it is a plain attribute read; the database is
read only at open, after an admin change, and when the watch loop sees another replica's
change (a version row, polled about every second).
"""

from __future__ import annotations

import builtins

import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio
import httpx
from pydantic import BaseModel, ConfigDict

from ..protocol import JsonObject
from ..errors import StoreError
from ..storage.database import Database
from ..config.yaml_source import SourceError, load_file
from .bindings import (
    BindingPolicy,
    HttpBindingConfig,
    PythonBindingConfig,
    binding_http_client,
    binding_to_json,
    make_binding,
    parse_binding,
)
from .errors import BindingConfigError, ConnectorError, RegistrationError, RegistrationNotFound
from .manifest import MANIFEST_FILENAMES, Manifest, load_manifest, parse_manifest_off_loop
from .results import MAX_RESULT_BYTES
from .storage import RegistrationStore, StoredRegistration, now_iso, open_registration_store
from .tool import ConnectorTool

log = logging.getLogger(__name__)

AnyBinding = HttpBindingConfig | PythonBindingConfig
BINDING_SIDECARS = ("binding.yaml", "binding.yml", "binding.json")


class ToolSummary(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    operation: str
    effect: str
    approval: bool


class Registration(BaseModel):
    """What the admin API lists: one connector and the tools it exposes."""

    model_config = ConfigDict(frozen=True)

    connector_id: str
    source: Literal["config", "api"]
    filename: str
    binding: JsonObject | None
    tools: list[ToolSummary]
    not_exposed: list[str]
    created_at: str | None = None
    updated_at: str | None = None


class RegistrationDetail(Registration):
    manifest: str


@dataclass(frozen=True)
class _Entry:
    source: Literal["config", "api"]
    filename: str
    text: str
    manifest: Manifest
    binding: AnyBinding | None
    tools: tuple[ConnectorTool, ...]
    created_at: str | None = None
    updated_at: str | None = None

    @property
    def connector_id(self) -> str:
        return self.manifest.connector_id

    @property
    def fingerprint(self) -> str:
        binding = json.dumps(binding_to_json(self.binding), sort_keys=True) if self.binding else ""
        return hashlib.sha256(f"{self.source}\0{self.text}\0{binding}".encode()).hexdigest()

    def registration(self, detail: bool = False) -> Registration:
        fields: dict[str, Any] = dict(
            connector_id=self.connector_id,
            source=self.source,
            filename=self.filename,
            binding=binding_to_json(self.binding) if self.binding else None,
            tools=[ToolSummary(name=t.name, operation=t.operation, effect=t.effect.value, approval=t.requires_approval) for t in self.tools],
            not_exposed=[op.name for op in self.manifest.operations if not op.exposed],
            created_at=self.created_at,
            updated_at=self.updated_at,
        )
        return RegistrationDetail(**fields, manifest=self.text) if detail else Registration(**fields)


class ConnectorRegistry:
    def __init__(
        self,
        storage: str | Database,
        bindings: Mapping[str, AnyBinding | Mapping[str, Any]] | None = None,
        *,
        poll_interval: float = 1.0,
        environ: Mapping[str, str] | None = None,
        max_result_bytes: int = MAX_RESULT_BYTES,
        policy: BindingPolicy | None = None,
    ) -> None:
        """`storage`: the store URL, or the gateway's `Database` (shared with the fence store).
        `bindings`: binding config by connector id for the config directory's connectors
        (the gateway config's say); without one, a `binding.yaml` beside the manifest.
        `policy`: what admin-API bindings may do (the gateway config's `connectors` grants);
        the default grants nothing, so only the config directory can bind operations."""
        self._store: RegistrationStore = open_registration_store(storage)
        self._bindings = {
            cid: b if isinstance(b, HttpBindingConfig | PythonBindingConfig) else parse_binding(b, where=f"bindings.{cid}")
            for cid, b in (bindings or {}).items()
        }
        self._poll_interval = poll_interval
        self._environ = environ
        self._policy = policy if policy is not None else BindingPolicy()
        self._max_result_bytes = max_result_bytes
        self._http: httpx.AsyncClient | None = None
        self._config: dict[str, _Entry] = {}
        self._api: dict[str, _Entry] = {}
        self._tools: tuple[ConnectorTool, ...] = ()
        self._fingerprint: tuple[tuple[str, str], ...] = ()
        self._version = 0
        self._db_version: int | None = None
        self._reload_lock: anyio.Lock | None = None
        self._changed: anyio.Event | None = None
        # Awaited after this process stored a change (the app tells the other replicas at once).
        self.stored_listeners: builtins.list[Callable[[], Awaitable[None]]] = []

    # -- lifecycle ---------------------------------------------------------------------

    async def open(self) -> None:
        self._reload_lock = anyio.Lock()
        self._changed = anyio.Event()
        # One pool for every HTTP-bound connector; keep-alive across calls.
        self._http = binding_http_client(limits=httpx.Limits(max_connections=100, max_keepalive_connections=20))
        await self._store.open()
        await self._reload()

    async def close(self) -> None:
        await self._store.close()
        if self._http is not None:
            client, self._http = self._http, None
            await client.aclose()

    async def __aenter__(self) -> "ConnectorRegistry":
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- reading -----------------------------------------------------------------------

    def tools(self) -> list[ConnectorTool]:
        return list(self._tools)

    def tool(self, name: str) -> ConnectorTool | None:
        return next((t for t in self._tools if t.name == name), None)

    @property
    def version(self) -> int:
        return self._version

    async def list(self) -> list[Registration]:
        return [e.registration() for e in self._entries()]

    async def show(self, connector_id: str) -> RegistrationDetail:
        for entry in self._entries():
            if entry.connector_id == connector_id:
                detail = entry.registration(detail=True)
                if isinstance(detail, RegistrationDetail):
                    return detail
        raise RegistrationNotFound(f"no connector {connector_id!r} is registered")

    # -- config directory ----------------------------------------------------------------

    async def load_dir(self, path: str | Path) -> builtins.list[Registration]:
        """Read every manifest in `path` (`*/connector.yaml`, `*/dex-connector.json`,
        `*.yaml`, `*.json`; binding files excluded). A bad file refuses the whole directory:
        the operator's config must be right before the gateway starts serving it."""
        entries: dict[str, _Entry] = {}
        for manifest_path, sidecar_dir, stem in find_manifests(Path(path)):
            manifest = load_manifest(manifest_path)
            if manifest.connector_id in entries:
                raise RegistrationError(
                    f"{manifest_path}: connector {manifest.connector_id!r} is also defined in {entries[manifest.connector_id].filename}"
                )
            binding = self._bindings.get(manifest.connector_id) or _sidecar_binding(sidecar_dir, stem)
            if binding is not None:
                await self._vet(binding, "config", str(manifest_path))
            entries[manifest.connector_id] = self._entry("config", str(manifest_path), manifest_path.read_text("utf-8"), manifest, binding)
        self._config = entries
        self._rebuild()
        return [e.registration() for e in entries.values()]

    # -- admin changes -------------------------------------------------------------------

    async def add(self, source_text: str, filename: str, binding: AnyBinding | Mapping[str, Any] | None) -> Registration:
        """Validate and store a registration (replacing one with the same connector id that
        the admin API added); every replica sees it within a poll."""
        manifest = await parse_manifest_off_loop(source_text, filename)
        config = None if binding is None else binding if isinstance(binding, HttpBindingConfig | PythonBindingConfig) else parse_binding(binding, where=filename)
        if config is not None:
            # The operator's grants, before anything is imported, resolved or read.
            await self._vet(config, "api", filename)
        entry = self._entry("api", filename, source_text, manifest, config)
        if entry.connector_id in self._config:
            raise RegistrationError(f"connector {entry.connector_id!r} is defined in the config directory ({self._config[entry.connector_id].filename})")
        taken = {t.name: e.connector_id for e in self._entries() if e.connector_id != entry.connector_id for t in e.tools}
        for tool in entry.tools:
            if tool.name in taken:
                raise RegistrationError(
                    f"{filename}: operation {tool.operation!r}: duplicate tool name {tool.name!r} (connector {taken[tool.name]!r} has it)"
                )
        now = now_iso()
        await self._store.put(StoredRegistration(
            connector_id=entry.connector_id, filename=filename, manifest=source_text,
            binding=binding_to_json(config) if config else None, created_at=now, updated_at=now,
        ))
        await self._reload()
        await self._stored()
        return (await self.show(entry.connector_id)).model_copy()

    async def remove(self, connector_id: str) -> None:
        if connector_id in self._config:
            raise RegistrationError(f"connector {connector_id!r} comes from the config directory; remove its file instead")
        if await self._store.delete(connector_id) is None:
            raise RegistrationNotFound(f"no connector {connector_id!r} is registered")
        await self._reload()
        await self._stored()

    def poke(self) -> None:
        """Another replica says the registrations changed: read them now, not at the next poll."""
        self._signal()

    # -- other replicas ------------------------------------------------------------------

    async def watch(self, on_change: Callable[[], Awaitable[None]]) -> None:
        """Run until cancelled: call `on_change` whenever the exposed tools change, by this
        replica's admin API or another replica's (noticed by polling the version row)."""
        seen = self._version
        while True:
            if self._changed is None:
                raise StoreError("the connector registry is not open")
            with anyio.move_on_after(self._poll_interval):
                await self._changed.wait()
            if self._changed.is_set():
                self._changed = anyio.Event()
            try:
                if await self._store.version() != self._db_version:
                    await self._reload()
            except Exception:  # a database hiccup must not end the loop; the next poll retries
                log.warning("connector registry: polling the registrations failed", exc_info=True)
                continue
            if self._version != seen:
                seen = self._version
                try:
                    await on_change()
                except Exception:  # noqa: BLE001 - a failed refresh must not stop watching for the next change
                    log.warning("connector registry: on_change failed", exc_info=True)

    # -- internals -----------------------------------------------------------------------

    async def _vet(self, binding: AnyBinding, source: Literal["config", "api"], where: str) -> None:
        """The policy's checks at registration: strings first, then the addresses a host name
        resolves to (every new connection is checked again on its peer address)."""
        self._policy.check(binding, source=source, where=where)
        await self._policy.check_resolved(binding, where=where)

    async def _stored(self) -> None:
        self._signal()
        for listener in self.stored_listeners:
            await listener()

    def _signal(self) -> None:
        if self._changed is not None:
            self._changed.set()

    def _entries(self) -> builtins.list[_Entry]:
        return [*self._config.values(), *(self._api[k] for k in sorted(self._api))]

    def _entry(self, source: Literal["config", "api"], filename: str, text: str, manifest: Manifest,
               binding: AnyBinding | None, created_at: str | None = None, updated_at: str | None = None) -> _Entry:
        exposed = manifest.exposed_operations
        if exposed and binding is None:
            names = ", ".join(op.name for op in exposed)
            raise BindingConfigError(f"{filename}: operations {names} are exposed but connector {manifest.connector_id!r} has no binding")
        tools: tuple[ConnectorTool, ...] = ()
        if exposed and binding is not None:
            runner = make_binding(binding, client=self._http, environ=self._environ, policy=self._policy,
                                  source=source, where=filename)
            tools = tuple(ConnectorTool.build(manifest, op, runner, max_result_bytes=self._max_result_bytes) for op in exposed)
        return _Entry(source, filename, text, manifest, binding, tools, created_at, updated_at)

    async def _reload(self) -> None:
        if self._reload_lock is None:
            raise StoreError("the connector registry is not open")
        async with self._reload_lock:
            version = await self._store.version()
            rows = await self._store.all()
            previous = self._api
            entries: dict[str, _Entry] = {}
            for row in rows:
                old = previous.get(row.connector_id)
                if old is not None and old.text == row.manifest and (binding_to_json(old.binding) if old.binding else None) == row.binding:
                    entries[row.connector_id] = old  # unchanged: keep the built tools
                    continue
                try:
                    binding = parse_binding(row.binding, where=row.filename) if row.binding else None
                    manifest = await parse_manifest_off_loop(row.manifest, row.filename)
                    entries[row.connector_id] = self._entry(
                        "api", row.filename, row.manifest, manifest, binding,
                        row.created_at, row.updated_at,
                    )
                except ConnectorError as exc:
                    # Stored by another replica that could build it (e.g. a Python callable
                    # importable there); this replica serves the rest.
                    log.warning("connector registration %s is left out here: %s", row.connector_id, exc)
            self._api = entries
            self._db_version = version
            self._rebuild()

    def _rebuild(self) -> None:
        tools: list[ConnectorTool] = []
        owners: dict[str, str] = {}
        for entry in self._entries():
            for tool in entry.tools:
                if tool.name in owners:
                    log.warning("connector tool %s of %s is left out: %s has the name", tool.name, entry.connector_id, owners[tool.name])
                    continue
                owners[tool.name] = entry.connector_id
                tools.append(tool)
        fingerprint = tuple((e.connector_id, e.fingerprint) for e in self._entries())
        self._tools = tuple(tools)
        if fingerprint != self._fingerprint:
            self._fingerprint = fingerprint
            self._version += 1


def find_manifests(root: Path) -> list[tuple[Path, Path, str | None]]:
    """(manifest, directory of its binding file, stem for a flat file) in a stable order."""
    if not root.is_dir():
        raise ConnectorError(f"{root}: the connectors directory does not exist")
    found: list[tuple[Path, Path, str | None]] = []
    for child in sorted(root.iterdir()):
        if child.is_dir():
            for name in MANIFEST_FILENAMES:
                if (child / name).is_file():
                    found.append((child / name, child, None))
                    break
        elif child.suffix in (".yaml", ".yml", ".json") and child.name not in BINDING_SIDECARS and ".binding." not in child.name:
            found.append((child, root, child.name.rsplit(".", 1)[0]))
    return found


def _sidecar_binding(directory: Path, stem: str | None) -> AnyBinding | None:
    """`binding.yaml` beside `<name>/connector.yaml`, or `<stem>.binding.yaml` beside a flat
    `<stem>.yaml`."""
    names = BINDING_SIDECARS if stem is None else tuple(f"{stem}.{n}" for n in BINDING_SIDECARS)
    for name in names:
        path = directory / name
        if path.is_file():
            try:
                data = load_file(path).data
            except SourceError as exc:
                raise BindingConfigError(str(exc)) from None
            return parse_binding(data, where=str(path))
    return None


__all__ = ["ConnectorRegistry", "Registration", "RegistrationDetail", "ToolSummary", "find_manifests"]
