"""The syntax of the operator's connector grants (`connectors:` in gateway.yaml), parsed at load.

`python_modules` (dotted module prefixes), `credential_env` (environment variable names) and
`allowed_hosts` (a host name, an address or a network, with an optional port). The config model
checks each entry with these functions, so a bad entry is an error with its file and line; the
binding policy (`connectors/bindings/policy.py`) enforces what the parsed entries grant. The
addresses no binding reaches unless listed (link-local, cloud metadata) live here too, since an
entry's `unlocks` is defined by them.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import TypeAlias

__all__ = [
    "IPV4_COMPATIBLE",
    "LINK_LOCAL",
    "METADATA_ADDRESSES",
    "METADATA_HOSTNAMES",
    "HostEntry",
    "IPAddress",
    "IPNetwork",
    "address_or_none",
    "NAT64",
    "check_env_name",
    "check_module_prefix",
    "parse_host_entry",
]

IPAddress: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network

# Instance metadata services: credentials of the machine the gateway runs on.
METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254",   # AWS, GCP, Azure, OpenStack, DigitalOcean, Oracle, ...
    "169.254.170.2",     # AWS ECS task metadata and credentials
    "fd00:ec2::254",     # AWS IMDS over IPv6
    "100.100.100.200",   # Alibaba Cloud
))
METADATA_HOSTNAMES: frozenset[str] = frozenset({
    "metadata", "metadata.google.internal", "metadata.goog",
    "instance-data", "instance-data.ec2.internal", "metadata.tencentyun.com",
})
LINK_LOCAL: tuple[IPNetwork, ...] = (ipaddress.ip_network("169.254.0.0/16"), ipaddress.ip_network("fe80::/10"))
NAT64 = ipaddress.ip_network("64:ff9b::/96")
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")

_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HOST_LABEL = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$")


# -- the entries, checked by the config model (gateway/config/model.py, ConnectorsConfig) ---------------


def check_module_prefix(value: str) -> str:
    """A dotted module name: `my_company.connectors` allows that module and its submodules."""
    value = value.strip()
    if not _MODULE.match(value):
        raise ValueError(f"{value!r} is not a dotted module name (e.g. my_company.connectors)")
    return value


def check_env_name(value: str) -> str:
    if not _ENV_NAME.match(value):
        raise ValueError(f"{value!r} is not an environment variable name")
    return value


@dataclass(frozen=True)
class HostEntry:
    """One `allowed_hosts` entry: a host name, an address or a network (CIDR), and for a name
    or an address optionally a port (`127.0.0.1:9100`, `[::1]:9100`, `billing.internal:443`)."""

    text: str
    name: str | None = None
    network: IPNetwork | None = None
    port: int | None = None

    def matches(self, host: str, address: IPAddress | None, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        if address is not None:
            return self.network is not None and address in self.network
        return self.name is not None and self.name == host

    def unlocks(self, address: IPAddress) -> bool:
        """Does this entry list a link-local or metadata `address` explicitly? A metadata
        address only by itself; a link-local one by a network inside the link-local range
        (so `0.0.0.0/0` or `::/0` never unlock them)."""
        net = self.network
        if net is None or address.version != net.version or address not in net:
            return False
        if address in METADATA_ADDRESSES:
            return net.num_addresses == 1
        return any(net.version == ll.version and net.subnet_of(ll) for ll in LINK_LOCAL)  # type: ignore[arg-type]


def parse_host_entry(value: str) -> HostEntry:
    text = value.strip().lower()
    if not text:
        raise ValueError("an empty host entry")
    if "://" in text:
        raise ValueError(f"{value!r} is a URL; write the host only (e.g. billing.internal or 127.0.0.1:9100)")
    if "/" in text:
        try:
            return HostEntry(text, network=ipaddress.ip_network(text, strict=False))
        except ValueError:
            raise ValueError(f"{value!r} is not a network in CIDR notation (e.g. 10.0.0.0/8)") from None
    host, port = text, None
    if text.startswith("["):
        inside, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError(f"{value!r}: write an IPv6 address with a port as [::1]:9100")
        host, port = inside, _port(value, rest[1:]) if rest else None
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
        port = _port(value, port_text)
    address = address_or_none(host)
    if address is not None:
        return HostEntry(text, network=ipaddress.ip_network(address), port=port)
    name = host.rstrip(".")
    if "*" in name:
        raise ValueError(f"{value!r}: wildcards are not supported; list each host name, or a network (CIDR)")
    if len(name) > 253 or not all(_HOST_LABEL.match(label) for label in name.split(".")):
        raise ValueError(f"{value!r} is not a host name, an IP address or a network (CIDR)")
    return HostEntry(text, name=name, port=port)


def _port(value: str, text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"{value!r}: the port must be a number from 1 to 65535")
    return int(text)


def address_or_none(host: str) -> IPAddress | None:
    """`host` as an IP address, or None when it is a name."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None
