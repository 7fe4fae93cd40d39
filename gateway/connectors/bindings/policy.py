"""What a binding may do: the operator's grants for admin-API registrations (issue 14).

The gateway config's `connectors` section says what a registration made through the admin API
may reach (the config directory is the operator's own files and keeps its freedom):

    connectors:
      python_modules: [my_company.connectors]     # callables in these modules (and their submodules)
      credential_env: [BILLING_TOKEN]             # environment variables a binding may send
      allowed_hosts: ["127.0.0.1:9100", billing.internal, 10.0.0.0/8]

Empty lists grant nothing: an admin-API binding of that kind is refused, naming the key to set.

Whatever the source, no binding reaches a link-local address (169.254.0.0/16, fe80::/10,
IPv4-in-IPv6 forms included) or a cloud metadata address or name unless `allowed_hosts` lists
it explicitly (an address, or a network inside the link-local range; a metadata address only by
itself; a metadata name only by name). That is checked at registration, on the addresses the
name resolves to (best effort), and again on the peer address of every new connection (the
authoritative check: DNS may change between the two).

Nothing here imports a binding's module: `check` looks at strings only, and python.py imports
only after it passed.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, TypeAlias

import anyio
import httpx

from ...config.model import ConnectorsConfig
from ...config.grants import (
    IPV4_COMPATIBLE,
    LINK_LOCAL,
    METADATA_ADDRESSES,
    METADATA_HOSTNAMES,
    HostEntry,
    IPAddress,
    IPNetwork,
    NAT64,
    address_or_none,
    check_env_name,
    check_module_prefix,
    parse_host_entry,
)
from ..errors import BindingNotAllowed
from .config import HttpBindingConfig, PythonBindingConfig

Source: TypeAlias = Literal["config", "api"]

PYTHON_MODULES_KEY = "connectors.python_modules"
CREDENTIAL_ENV_KEY = "connectors.credential_env"
ALLOWED_HOSTS_KEY = "connectors.allowed_hosts"


RESOLVE_TIMEOUT = 2.0  # seconds for the registration-time look-up (the connect-time check decides)


# -- addresses no binding reaches unless listed --------------------------------------------------


def _embedded_ipv4(address: IPAddress) -> IPAddress | None:
    """The IPv4 address an IPv6 one carries (mapped, NAT64, 6to4, IPv4-compatible), which is
    where a connection to it may end up."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in NAT64 or (address in IPV4_COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def special_kind(address: IPAddress) -> str | None:
    """'a cloud metadata address', 'a link-local address', or None."""
    for candidate in (address, _embedded_ipv4(address)):
        if candidate is None:
            continue
        if candidate in METADATA_ADDRESSES:
            return "a cloud metadata address"
        if candidate.is_link_local:
            return "a link-local address"
    return None


def url_host_port(base_url: str) -> tuple[str, int]:
    """The host (lowercase, no trailing dot, IPv6 without brackets) and port a URL reaches."""
    url = httpx.URL(base_url)
    port = url.port or (443 if url.scheme == "https" else 80)
    return url.host.lower().rstrip("."), port


# -- the policy -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BindingPolicy:
    """The operator's grants. The default grants nothing to the admin API."""

    python_modules: tuple[str, ...] = ()
    credential_env: frozenset[str] = frozenset()
    allowed_hosts: tuple[HostEntry, ...] = ()

    @classmethod
    def of(
        cls,
        python_modules: Iterable[str] = (),
        credential_env: Iterable[str] = (),
        allowed_hosts: Iterable[str] = (),
    ) -> "BindingPolicy":
        return cls(
            python_modules=tuple(check_module_prefix(m) for m in python_modules),
            credential_env=frozenset(check_env_name(e) for e in credential_env),
            allowed_hosts=tuple(parse_host_entry(h) for h in allowed_hosts),
        )

    @classmethod
    def from_config(cls, connectors: ConnectorsConfig) -> "BindingPolicy":
        """The policy the `connectors:` section of gateway.yaml grants."""
        return cls.of(connectors.python_modules, connectors.credential_env, connectors.allowed_hosts)

    # -- Python ------------------------------------------------------------------------------

    def module_allowed(self, module: str) -> bool:
        """`a.b` allows `a.b` and `a.b.c`, never `a.bc`."""
        return any(module == prefix or module.startswith(prefix + ".") for prefix in self.python_modules)

    def _check_python(self, binding: PythonBindingConfig, where: str) -> None:
        module, _, attribute = binding.callable.partition(":")
        if not self.python_modules:
            raise BindingNotAllowed(
                f"{where}: binding.callable {binding.callable!r} is refused: Python bindings through the admin API "
                f"are off; the operator enables them for callables in chosen modules with the gateway config key "
                f"{PYTHON_MODULES_KEY} (or puts the binding in the connectors directory)",
                config_key=PYTHON_MODULES_KEY,
            )
        if not self.module_allowed(module):
            allowed = ", ".join(self.python_modules)
            raise BindingNotAllowed(
                f"{where}: binding.callable {binding.callable!r} is refused: module {module!r} is not in "
                f"{PYTHON_MODULES_KEY} ({allowed}, and their submodules)",
                config_key=PYTHON_MODULES_KEY,
            )
        if any(part.startswith("_") for part in attribute.split(".")):
            raise BindingNotAllowed(
                f"{where}: binding.callable {binding.callable!r} is refused: a callable registered through the admin "
                "API must be a public name (no part starting with '_')",
                config_key=PYTHON_MODULES_KEY,
            )

    # -- HTTP --------------------------------------------------------------------------------

    def _check_credential(self, binding: HttpBindingConfig, where: str) -> None:
        if binding.credential is None:
            return
        env = binding.credential.env
        if env not in self.credential_env:
            granted = ", ".join(sorted(self.credential_env)) or "none"
            raise BindingNotAllowed(
                f"{where}: binding.credential.env {env!r} is refused: a binding registered through the admin API may "
                f"only send environment variables listed in the gateway config key {CREDENTIAL_ENV_KEY} "
                f"(listed: {granted})",
                config_key=CREDENTIAL_ENV_KEY,
            )

    def _check_host(self, binding: HttpBindingConfig, source: Source, where: str) -> None:
        try:
            host, port = url_host_port(binding.base_url)
        except (httpx.InvalidURL, ValueError) as exc:
            raise BindingNotAllowed(f"{where}: binding.base_url is not a valid URL: {exc}", config_key=ALLOWED_HOSTS_KEY) from None
        address = address_or_none(host)
        if address is None and host in METADATA_HOSTNAMES and not any(e.name == host for e in self.allowed_hosts):
            raise BindingNotAllowed(
                f"{where}: binding.base_url host {host!r} is refused: it names a cloud metadata service; only an "
                f"explicit {ALLOWED_HOSTS_KEY} entry allows it",
                config_key=ALLOWED_HOSTS_KEY,
            )
        if address is not None:
            self._check_address(address, f"{where}: binding.base_url host {host!r}")
        if source == "config":
            return
        if not self.allowed_hosts:
            raise BindingNotAllowed(
                f"{where}: binding.base_url {binding.base_url!r} is refused: HTTP bindings through the admin API are "
                f"off; the operator lists the hosts they may reach in the gateway config key {ALLOWED_HOSTS_KEY}",
                config_key=ALLOWED_HOSTS_KEY,
            )
        if not any(entry.matches(host, address, port) for entry in self.allowed_hosts):
            listed = ", ".join(e.text for e in self.allowed_hosts)
            what = f"address {host}" if address is not None else f"host name {host!r}"
            raise BindingNotAllowed(
                f"{where}: binding.base_url {binding.base_url!r} is refused: {what} (port {port}) is not in "
                f"{ALLOWED_HOSTS_KEY} ({listed}); a host name must be listed by name",
                config_key=ALLOWED_HOSTS_KEY,
            )

    def _check_address(self, address: IPAddress, what: str) -> None:
        if self.address_refusal(address) is not None:
            raise BindingNotAllowed(
                f"{what} is refused: {address} is {special_kind(address)}; only an explicit {ALLOWED_HOSTS_KEY} "
                "entry for it allows that",
                config_key=ALLOWED_HOSTS_KEY,
            )

    def address_refusal(self, address: IPAddress) -> str | None:
        """Why no binding may connect to `address` (None: it may)."""
        kind = special_kind(address)
        if kind is None:
            return None
        targets = [a for a in (address, _embedded_ipv4(address)) if a is not None and special_kind(a) is not None]
        if all(any(entry.unlocks(t) for entry in self.allowed_hosts) for t in targets):
            return None
        return f"{address} is {kind}, which {ALLOWED_HOSTS_KEY} does not list"

    def peer_refusal(self, peer: str) -> str | None:
        """The connect-time check on the address a new connection actually reached."""
        address = address_or_none(peer.split("%", 1)[0])  # an IPv6 zone id ("fe80::1%eth0") is not part of the address
        if address is None:
            return f"the peer address {peer!r} could not be read"
        return self.address_refusal(address)

    # -- entry points -------------------------------------------------------------------------

    def check(self, binding: HttpBindingConfig | PythonBindingConfig, *, source: Source, where: str) -> None:
        """Refuse (BindingNotAllowed) what the operator did not grant; strings only, so nothing
        is imported or resolved. `source="config"`: the operator's own connectors directory,
        which only the link-local and metadata rule applies to."""
        if isinstance(binding, PythonBindingConfig):
            if source == "api":
                self._check_python(binding, where)
            return
        if source == "api":
            self._check_credential(binding, where)
        self._check_host(binding, source, where)

    async def check_resolved(self, binding: HttpBindingConfig | PythonBindingConfig, *, where: str) -> None:
        """At registration: refuse a host name that resolves to a link-local or metadata address.
        Best effort (a name that does not resolve now passes); every connection is checked again."""
        if not isinstance(binding, HttpBindingConfig):
            return
        try:
            host, port = url_host_port(binding.base_url)
        except (httpx.InvalidURL, ValueError):
            return  # check() has refused it already
        if address_or_none(host) is not None:
            return
        infos: list[tuple[object, ...]] = []
        with anyio.move_on_after(RESOLVE_TIMEOUT):
            try:
                infos = list(await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM))
            except OSError:  # does not resolve (yet): the connect-time check decides
                return
        for info in infos:
            sockaddr = info[4]
            if not isinstance(sockaddr, tuple):
                continue
            address = address_or_none(str(sockaddr[0]).split("%", 1)[0])
            if address is not None:
                self._check_address(address, f"{where}: binding.base_url host {host!r} (resolves to {address})")


__all__ = [
    "ALLOWED_HOSTS_KEY", "CREDENTIAL_ENV_KEY", "METADATA_ADDRESSES", "METADATA_HOSTNAMES", "PYTHON_MODULES_KEY",
    "BindingPolicy", "HostEntry", "check_env_name", "check_module_prefix", "parse_host_entry", "special_kind",
    "url_host_port",
]
