"""How a connector's operations are reached: the binding configuration (a pydantic boundary).

Stored with each registration (admin API) or read from `binding.yaml` beside a manifest in the
config directory:

    type: http
    base_url: http://127.0.0.1:9100/billing      # POST <base_url>/<operation>
    credential: {header: Authorization, env: BILLING_TOKEN, scheme: Bearer}
    connect_timeout: 5

    type: python
    callable: my_package.billing:handle           # module:function, async or sync
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from ...protocol import JsonObject
from ..errors import BindingConfigError

_CALLABLE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP header name (RFC 9110 token)


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CredentialConfig(_Strict):
    """A header whose value comes from an environment variable, read on every attempt (so a
    rotated secret needs no restart) and never stored or logged."""

    header: str = "Authorization"
    env: str
    scheme: str | None = "Bearer"

    @field_validator("env")
    @classmethod
    def _env_name(cls, value: str) -> str:
        if not _ENV_NAME.match(value):
            raise ValueError(f"not an environment variable name: {value!r}")
        return value

    @field_validator("header")
    @classmethod
    def _header_name(cls, value: str) -> str:
        if not _TOKEN.match(value):
            raise ValueError(f"not an HTTP header name: {value!r}")
        return value

    @field_validator("scheme")
    @classmethod
    def _scheme_token(cls, value: str | None) -> str | None:
        if value is not None and not _TOKEN.match(value):
            raise ValueError(f"not an authorization scheme: {value!r}")
        return value


class HttpBindingConfig(_Strict):
    type: Literal["http"]
    base_url: str
    credential: CredentialConfig | None = None
    connect_timeout: float = Field(default=5.0, gt=0)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"base_url must be an http:// or https:// URL, not {value!r}")
        return value.rstrip("/")


class PythonBindingConfig(_Strict):
    type: Literal["python"]
    callable: str

    @field_validator("callable")
    @classmethod
    def _module_function(cls, value: str) -> str:
        if not _CALLABLE.match(value):
            raise ValueError(f"callable must be 'module:function', not {value!r}")
        return value


BindingConfig = Annotated[HttpBindingConfig | PythonBindingConfig, Field(discriminator="type")]
_ADAPTER: TypeAdapter[HttpBindingConfig | PythonBindingConfig] = TypeAdapter(BindingConfig)


def parse_binding(data: Any, *, where: str) -> HttpBindingConfig | PythonBindingConfig:
    """Validate binding `data`; errors name `where` (a file or 'binding') and the key."""
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(binding)'}: {err['msg']}" for err in exc.errors()
        )
        raise BindingConfigError(f"{where}: invalid binding: {problems}") from None


def binding_to_json(binding: HttpBindingConfig | PythonBindingConfig) -> JsonObject:
    return binding.model_dump(mode="json", exclude_none=True)
