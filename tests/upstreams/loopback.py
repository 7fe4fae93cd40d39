"""Real loopback servers for the transport tests, in the test's own event loop.

* `web_server(...)`: a well-behaved aiohttp.web server (optionally TLS, optionally a short
  keep-alive so it closes idle connections); `WebServer.ports` records the client port of
  every request, so a test can count connections.
* `raw_server(tg, handler)`: a bare TCP server for misbehaving peers (resets, EOF mid-body,
  silence); the handler gets the socket stream and reads requests with `read_request`.
* `self_signed(tmp_path)`: a CA and a server certificate for 127.0.0.1/localhost (cryptography).
"""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc
from aiohttp import web


@dataclass
class WebServer:
    url: str
    ports: list[int] = field(default_factory=list)  # client port of every request, in order

    @property
    def connections(self) -> int:
        return len(set(self.ports))


@asynccontextmanager
async def web_server(
    routes: list[web.RouteDef], *, ssl_context: ssl.SSLContext | None = None, keepalive_timeout: float = 75.0
) -> AsyncIterator[WebServer]:
    server = WebServer("")

    @web.middleware
    async def record(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        server.ports.append(peer[1] if peer else -1)
        return await handler(request)

    app = web.Application(middlewares=[record])
    app.add_routes(routes)
    runner = web.AppRunner(app, keepalive_timeout=keepalive_timeout, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context)
    await site.start()
    host, port = runner.addresses[0][:2]
    server.url = f"{'https' if ssl_context else 'http'}://127.0.0.1:{port}"
    try:
        yield server
    finally:
        await runner.cleanup()


@dataclass
class RawServer:
    port: int
    requests: int = 0  # complete requests (head + body) read by the server
    connections: int = 0
    peer_eofs: int = 0  # connections on which the server saw the client close
    events: dict[str, anyio.Event] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def event(self, name: str) -> anyio.Event:
        return self.events.setdefault(name, anyio.Event())

    async def read_request(self, stream: anyio.abc.SocketStream, buffer: bytearray) -> bool:
        """Read one request (head + Content-Length body) off `buffer`/`stream`; False on EOF."""
        while b"\r\n\r\n" not in buffer:
            try:
                buffer += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                self.peer_eofs += 1
                return False
        head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(rest) < length:
            rest += await stream.receive()
        buffer[:] = rest[length:]
        self.requests += 1
        return True


RawHandler = Callable[[anyio.abc.SocketStream, RawServer], Awaitable[None]]


def ok(body: bytes = b'{"ok":true}', extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n%s" % (len(body), extra, body)


def reset(stream: anyio.abc.SocketStream) -> None:
    """Make the coming close an RST (SO_LINGER 0)."""
    sock = stream.extra(anyio.abc.SocketAttribute.raw_socket)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


async def raw_server(tg: anyio.abc.TaskGroup, handler: RawHandler) -> RawServer:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    server = RawServer(listener.extra(anyio.abc.SocketAttribute.local_port))

    async def on_connect(stream: anyio.abc.SocketStream) -> None:
        server.connections += 1
        async with stream:
            try:
                await handler(stream, server)
            except (anyio.BrokenResourceError, anyio.EndOfStream, anyio.ClosedResourceError, OSError):
                pass

    async def serve() -> None:
        async with listener:
            await listener.serve(on_connect)

    tg.start_soon(serve)
    return server


async def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.005)


def self_signed(directory: Path) -> tuple[Path, Path, Path]:
    """(ca.pem, server-cert.pem, server-key.pem): a private CA and a leaf for 127.0.0.1/localhost."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "dex test CA")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                    x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    ca_path, cert_path, key_path = directory / "ca.pem", directory / "server.pem", directory / "server.key"
    ca_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_path.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return ca_path, cert_path, key_path


def server_tls(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context
