"""A real S3-compatible server for tests (moto's server mode on loopback), and a small proxy in
front of it that records every exchange and can misbehave on cue.

    with moto_s3() as s3:                          # s3.url, s3.objects(bucket), s3.create_bucket(name)
        with S3Proxy(s3.url) as proxy:             # proxy.url: point a store's endpoint_url here
            proxy.conflicts = 2                    # answer 409 to the next 2 conditional PUTs
            proxy.hold_puts = True                 # forward a PUT, then hold its answer until release()
            proxy.exchanges                        # [(method, path, status, request headers)]
"""

from __future__ import annotations

import http.client
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import boto3

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class MotoS3:
    url: str

    def client(self) -> Any:
        return boto3.client("s3", endpoint_url=self.url, aws_access_key_id="test", aws_secret_access_key="test",
                            region_name="us-east-1")

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def objects(self, bucket: str) -> dict[str, int]:
        """key -> size of every object in the bucket."""
        listed = self.client().list_objects_v2(Bucket=bucket)
        return {o["Key"]: int(o["Size"]) for o in listed.get("Contents", [])}


@contextmanager
def moto_s3() -> Iterator[MotoS3]:
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield MotoS3(f"http://127.0.0.1:{port}")
    finally:
        server.stop()


@dataclass
class Exchange:
    method: str
    path: str
    status: int
    headers: dict[str, str] = field(default_factory=dict)


class S3Proxy:
    """Forwards to `target`; records, and on cue answers 409, holds PUT answers, or cuts GET bodies."""

    def __init__(self, target: str) -> None:
        self.target = urlsplit(target)
        self.exchanges: list[Exchange] = []
        self.conflicts = 0
        self.hold_puts = False
        self.cut_gets = False
        self.put_forwarded = threading.Event()  # set when a held PUT reached the target
        self._release = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "S3Proxy":
        threading.Thread(target=self._server.serve_forever, name="s3-proxy", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()

    def release(self) -> None:
        self._release.set()

    def statuses(self, method: str) -> list[int]:
        return [e.status for e in self.exchanges if e.method == method]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
                return None

            def _relay(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                if self.command == "PUT" and "if-none-match" in headers and proxy.conflicts > 0:
                    proxy.conflicts -= 1
                    self._answer(409, b"<Error><Code>ConditionalRequestConflict</Code><Message>A conflicting "
                                      b"operation is in progress</Message></Error>", headers)
                    return
                upstream = http.client.HTTPConnection(proxy.target.hostname, proxy.target.port, timeout=30)
                forwarded = {k: v for k, v in self.headers.items() if k.lower() != "expect"}
                upstream.request(self.command, self.path, body=body, headers=forwarded)
                response = upstream.getresponse()
                data = response.read()
                proxy.exchanges.append(Exchange(self.command, self.path, response.status, headers))
                if self.command == "PUT" and proxy.hold_puts:
                    proxy.put_forwarded.set()
                    proxy._release.wait()
                self.send_response(response.status)
                for name, value in response.getheaders():
                    if name.lower() not in ("content-length", "transfer-encoding", "connection", "date", "server"):
                        self.send_header(name, value)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data[: len(data) // 2] if proxy.cut_gets and self.command == "GET" else data)
                if proxy.cut_gets and self.command == "GET":
                    self.close_connection = True
                upstream.close()

            def _answer(self, status: int, body: bytes, headers: dict[str, str]) -> None:
                proxy.exchanges.append(Exchange(self.command, self.path, status, headers))
                self.send_response(status)
                self.send_header("content-type", "application/xml")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _relay

        return Handler
