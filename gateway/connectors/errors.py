"""The connector package's exceptions: one root, a child per boundary."""

from __future__ import annotations

from ..errors import GatewayError


class ConnectorError(GatewayError):
    """Anything the connector package refuses or cannot do (a branch of the gateway's one tree)."""


class ManifestError(ConnectorError):
    """A manifest (or its reviewer's agent block / inputSchema) that cannot be registered.

    The message names the file, the operation and the key, so a reviewer can fix it without
    reading the gateway's source.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str,
        operation: str | None = None,
        key: str | None = None,
        line: int | None = None,
    ) -> None:
        self.file = file
        self.operation = operation
        self.key = key
        self.line = line
        self.reason = message
        where = f"{file}:{line}" if line is not None else file
        parts = [where]
        if operation is not None:
            parts.append(f"operation {operation!r}")
        if key is not None:
            parts.append(f"key {key!r}")
        super().__init__(f"{': '.join(parts)}: {message}")


class BindingConfigError(ConnectorError):
    """A binding configuration that is malformed or missing where one is needed."""


class RegistrationError(ConnectorError):
    """A registration that conflicts with the ones already there (id, tool names)."""


class RegistrationNotFound(ConnectorError):
    """No registration with that connector id."""


class BindingNotAllowed(BindingConfigError):
    """A binding the operator's policy does not grant (an admin-API Python callable outside
    `connectors.python_modules`, a credential not in `connectors.credential_env`, a `base_url`
    host outside `connectors.allowed_hosts`, a link-local or metadata address). `config_key`
    names the gateway config key that would grant it."""

    def __init__(self, message: str, *, config_key: str) -> None:
        self.config_key = config_key
        super().__init__(message)
