"""Connectors by manifest (SPEC section 7): reviewed operations exposed as gateway tools."""

from __future__ import annotations

from .bindings import BindingConfig, ConnectorRequest, ConnectorResponse, HttpBindingConfig, NothingSent, PythonBindingConfig
from .errors import BindingConfigError, ConnectorError, ManifestError, RegistrationError, RegistrationNotFound
from .manifest import Manifest, Operation, load_manifest, parse_manifest
from .registry import ConnectorRegistry, Registration, RegistrationDetail
from .tool import ConnectorTool

__all__ = [
    "BindingConfig", "BindingConfigError", "ConnectorError", "ConnectorRegistry", "ConnectorRequest",
    "ConnectorResponse", "ConnectorTool", "HttpBindingConfig", "Manifest", "ManifestError", "NothingSent",
    "Operation", "PythonBindingConfig", "Registration", "RegistrationDetail", "RegistrationError",
    "RegistrationNotFound", "load_manifest", "parse_manifest",
]
