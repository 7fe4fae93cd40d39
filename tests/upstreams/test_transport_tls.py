"""https:// upstreams: the same transport over TLS, trusting a private CA per upstream
(`tls_ca_file`) or through `SSL_CERT_FILE`; an untrusted certificate is "not sent"."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from aiohttp import web

from gateway.config.model import HttpUpstreamConfig
from gateway.errors import RequestNotSent, UpstreamNotSent
from gateway.upstreams.session import UpstreamSession
from tests.upstreams.sessions import http_session
from gateway.upstreams.transport import HttpRequest, ssl_context
from gateway.upstreams.upstream import Upstream
from tests.upstreams.loopback import WebServer, self_signed, server_tls, web_server

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@pytest.fixture
def anyio_backend(both_loops: Any) -> Any:
    return both_loops

routes = web.RouteTableDef()


@routes.post("/mcp")
async def mcp(request: web.Request) -> web.Response:
    """A stateless handshake-era MCP endpoint, just enough for `protocol: handshake`."""
    message = await request.json()
    if "id" not in message:
        return web.Response(status=202)
    if message["method"] == "initialize":
        result = {"protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": {"name": "tls", "version": "1"}}
    else:
        result = {"content": [{"type": "text", "text": "over tls"}], "isError": False}
    return web.json_response({"jsonrpc": "2.0", "id": message["id"], "result": result})


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return self_signed(tmp_path_factory.mktemp("tls"))


@pytest.fixture
async def server(certs: tuple[Path, Path, Path]) -> AsyncIterator[WebServer]:
    _, cert, key = certs
    async with web_server(list(routes), ssl_context=server_tls(cert, key)) as running:
        yield running


async def test_https_with_the_private_ca_and_keep_alive(server: WebServer, certs: tuple[Path, Path, Path],
                                                       transport_class: Any) -> None:
    ca, _, _ = certs
    transport = transport_class(connect_timeout=5, ssl_context=ssl_context(str(ca)))
    try:
        for i in range(3):
            body = json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call"}).encode()
            async with transport.stream(HttpRequest("POST", f"{server.url}/mcp", {"content-type": "application/json"}, body)) as r:
                assert r.status == 200
                assert json.loads(await r.aread())["result"]["content"][0]["text"] == "over tls"
    finally:
        await transport.aclose()
    assert server.url.startswith("https://")
    assert len(server.ports) == 3 and server.connections == 1


async def test_untrusted_certificate_is_not_sent(server: WebServer, transport_class: Any) -> None:
    transport = transport_class(connect_timeout=5)  # the system store does not know our CA
    try:
        with pytest.raises(RequestNotSent, match="(?i)certificate"):
            async with transport.stream(HttpRequest("POST", f"{server.url}/mcp", {}, b"{}")):
                pass
    finally:
        await transport.aclose()
    assert server.ports == []  # the TLS handshake failed before any request


async def test_upstream_config_tls_ca_file(server: WebServer, certs: tuple[Path, Path, Path], tg: anyio.abc.TaskGroup) -> None:
    ca, _, _ = certs
    config = HttpUpstreamConfig(name="secure", transport="streamable_http", url=f"{server.url}/mcp",
                                protocol="handshake", tls_ca_file=str(ca))
    upstream = Upstream(config, tg)
    try:
        result = await upstream.request("tools/call", {"name": "t", "arguments": {}})
    finally:
        await upstream.aclose()
    assert result["content"][0]["text"] == "over tls"

    untrusted = http_session("plain", f"{server.url}/mcp", headers={}, protocol="handshake", connect_timeout=5)
    try:
        with pytest.raises(UpstreamNotSent, match="(?i)certificate"):
            await untrusted.request("tools/call", {"name": "t", "arguments": {}}, timeout=5)
    finally:
        await untrusted.aclose()


async def test_ssl_cert_file_is_honoured_by_default(server: WebServer, certs: tuple[Path, Path, Path],
                                                    transport_class: Any) -> None:
    """Without `tls_ca_file` the system store is used, and OpenSSL's default paths read
    SSL_CERT_FILE (checked in a child process: the variable is read when aiohttp loads)."""
    ca, _, _ = certs
    script = textwrap.dedent(f"""
        import asyncio
        from {transport_class.__module__} import {transport_class.__name__} as Transport
        from gateway.upstreams.transport import HttpRequest

        async def main():
            transport = Transport(connect_timeout=5)
            try:
                async with transport.stream(HttpRequest("POST", "{server.url}/mcp", {{}}, b'{{"jsonrpc":"2.0","id":1,"method":"ping"}}')) as r:
                    print(r.status)
            finally:
                await transport.aclose()

        asyncio.run(main())
    """)
    env = {**os.environ, "SSL_CERT_FILE": str(ca)}
    done = await anyio.run_process([sys.executable, "-c", script], env=env, check=False)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().strip() == "200"


async def test_an_unreadable_ca_file_is_not_sent_and_http_urls_refuse_it(tmp_path: Path, tg: anyio.abc.TaskGroup) -> None:
    config = HttpUpstreamConfig(name="secure", transport="streamable_http", url="https://127.0.0.1:9/mcp",
                                tls_ca_file=str(tmp_path / "missing.pem"))
    upstream = Upstream(config, tg)
    with pytest.raises(UpstreamNotSent, match="TLS settings cannot be loaded"):
        await upstream.request("tools/call", {"name": "t", "arguments": {}})
    with pytest.raises(ValueError, match="only used with an https:// url"):
        HttpUpstreamConfig(name="plain", transport="streamable_http", url="http://127.0.0.1:9/mcp", tls_ca_file="ca.pem")
