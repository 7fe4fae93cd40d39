"""The host API's guards against a real `dex-agent approvals serve` process, over real sockets:
the token is checked before any byte of a body is read (a 1 GiB announcement is answered at
once, memory stays flat), a body beyond the cap is refused with 413 while it streams, and the
Host / Origin checks refuse DNS rebinding and other sites' pages while CLI clients pass."""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.agent_host.host_support import Proc, dex_agent, run_agent
from tests.support.servers import free_port

APPROVER, AGENT = "approver-secret", "agent-secret"
ENV = {"DEX_APPROVER_TOKEN": APPROVER, "DEX_AGENT_TOKEN": AGENT}
GIB = 1024 ** 3
MIB = 1024 * 1024
MAX_BODY_BYTES = MIB  # the documented default of --api-max-body-bytes
ANSWER_SECONDS = 5.0
BODY_ROUTES = ("/sessions/s/steer", "/sessions/s/cancel", "/sessions/s/plan/approve", "/approvals/a1", "/questions/q1")


@dataclass
class Served:
    proc: Proc
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def peak_rss_reset(self) -> None:
        Path(f"/proc/{self.proc.process.pid}/clear_refs").write_text("5")  # resets VmHWM

    def peak_rss(self) -> int:
        for line in Path(f"/proc/{self.proc.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmHWM in /proc/<pid>/status")


def _serve(tmp_path: Path, *flags: str) -> Iterator[Served]:
    port = free_port()
    proc = dex_agent("approvals", "serve", "--store", str(tmp_path / "api.db"), "--port", str(port), *flags, env=ENV)
    try:
        proc.wait_for(r"approvals API on")
        yield Served(proc, port)
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    yield from _serve(tmp_path_factory.mktemp("guard"))


@pytest.fixture(scope="module")
def configured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    yield from _serve(tmp_path_factory.mktemp("guard-configured"), "--api-allowed-host", "agent.example",
                      "--api-max-body-bytes", "2048")


def _connect(port: int, head: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=ANSWER_SECONDS)
    sock.sendall(head.encode("latin-1"))
    return sock


def _head(method: str, path: str, port: int, *lines: str) -> str:
    return "\r\n".join([f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", *lines, "", ""])


def _read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One response (with Content-Length) read within ANSWER_SECONDS, else the test fails."""
    sock.settimeout(ANSWER_SECONDS)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
        length = int(headers.get("content-length", "0"))
        while len(body) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
    except TimeoutError:
        raise AssertionError(f"no answer within {ANSWER_SECONDS} s (the host waits for the body?)") from None
    return int(status_line.split()[1]), headers, body


def _push(sock: socket.socket, total: int, chunked: bool) -> int:
    """Send up to `total` body bytes, stopping as soon as the host answers or closes; what was sent."""
    piece = b"a" * (64 * 1024)
    sent = 0
    try:
        while sent < total:
            if select.select([sock], [], [], 0)[0]:
                break
            sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
            sent += len(piece)
        if chunked and sent >= total:
            sock.sendall(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass
    return sent


def test_an_unauthenticated_body_is_refused_before_a_byte_is_read(served: Served) -> None:
    for path in BODY_ROUTES:
        for framing in (f"Content-Length: {GIB}", "Transfer-Encoding: chunked"):
            with _connect(served.port, _head("POST", path, served.port, "Content-Type: application/json", framing)) as sock:
                status, headers, body = _read_response(sock)
                assert status == 401, (path, framing, status, body)
                assert json.loads(body) == {"error": "missing bearer token"} and headers.get("connection") == "close"
    # The agent's own token and an unknown one: refused alike, before the body.
    for token, code in ((AGENT, 403), ("nope", 401)):
        head = _head("POST", "/sessions/s/steer", served.port, f"Authorization: Bearer {token}", f"Content-Length: {GIB}")
        with _connect(served.port, head) as sock:
            assert _read_response(sock)[0] == code

    # Announce 1 GiB, push 64 MiB anyway: the host answered first and takes none of it in.
    served.peak_rss_reset()
    before = served.peak_rss()
    with _connect(served.port, _head("POST", "/sessions/s/steer", served.port, f"Content-Length: {GIB}")) as sock:
        assert _read_response(sock)[0] == 401
        _push(sock, 64 * MIB, chunked=False)
    time.sleep(0.3)
    grown = served.peak_rss() - before
    assert grown < 8 * MIB, f"peak RSS grew by {grown / MIB:.1f} MiB"
    assert httpx.get(f"{served.url}/approvals", headers={"Authorization": f"Bearer {APPROVER}"}).status_code == 200


def test_a_refused_request_whose_body_is_still_coming_reads_the_refusal_not_a_reset(served: Served) -> None:
    """The refusal is written before the body is read; the connection then closes in stages
    (gateway/http/lingering.py): the answer is followed by an end of file, never by a reset, which
    can discard the answer before the client reads it (with a plain close, every one of these ended
    in a reset, and an httpx POST with a wrong token failed with "connection reset by peer" now
    and then)."""
    body = b"a" * MAX_BODY_BYTES  # more than the server reads before it answers a route that does not read it
    for _ in range(3):
        head = _head("POST", "/sessions/s/steer", served.port, "Authorization: Bearer wrong", f"Content-Length: {len(body)}")
        with socket.create_connection(("127.0.0.1", served.port), timeout=ANSWER_SECONDS) as sock:
            sock.sendall(head.encode("latin-1") + body)
            time.sleep(0.3)  # answered and closed meanwhile: a reset would be here by now
            status, headers, answer = _read_response(sock)
            assert sock.recv(65536) == b"", "more than the refusal"  # the end: a reset here can cost the answer
        assert status == 401 and json.loads(answer) == {"error": "unknown token"}, (status, answer)
        assert headers.get("connection") == "close"
    with httpx.Client(base_url=served.url) as client:
        for _ in range(50):
            refused = client.post("/sessions", headers={"Authorization": "Bearer wrong"}, json={"x": "y" * 4096})
            assert refused.status_code == 401


def test_an_authenticated_body_beyond_the_cap_is_refused_while_it_streams(served: Served) -> None:
    auth = f"Authorization: Bearer {APPROVER}"
    # Announced: refused at once, nothing sent.
    for path in BODY_ROUTES:
        with _connect(served.port, _head("POST", path, served.port, auth, f"Content-Length: {10 * MIB}")) as sock:
            status, headers, body = _read_response(sock)
            assert status == 413, (path, status, body)
            assert json.loads(body)["error"] == (
                f"request body too large: the host API takes at most {MAX_BODY_BYTES} bytes (set with --api-max-body-bytes)"
            )
            assert headers["content-type"] == "application/json" and headers.get("connection") == "close"

    # Streamed without a length: refused once past the cap, memory bounded by the cap.
    served.peak_rss_reset()
    before = served.peak_rss()
    with _connect(served.port, _head("POST", "/sessions/s/steer", served.port, auth, "Transfer-Encoding: chunked")) as sock:
        sent = _push(sock, 10 * MIB, chunked=True)
        status, _, body = _read_response(sock)
    grown = served.peak_rss() - before
    assert status == 413, (status, body)
    assert sent < 10 * MIB, f"the host let {sent} bytes in before answering"
    assert grown < 8 * MIB, f"peak RSS grew by {grown / MIB:.1f} MiB"

    # Under the cap, the same route works as before.
    small = httpx.post(f"{served.url}/sessions/s/steer", json={"text": "x" * 100}, headers={"Authorization": f"Bearer {APPROVER}"})
    assert small.status_code == 404 and small.json() == {"error": "no such session"}


def test_foreign_hosts_and_origins_are_refused(served: Served) -> None:
    auth = {"Authorization": f"Bearer {APPROVER}"}
    with httpx.Client(base_url=served.url, headers=auth) as client:
        # DNS rebinding: the browser sends the attacker's name as Host.
        for path in ("/approvals", "/sessions/s/events", "/ui/sessions/s", "/ui/app.js"):
            refused = client.get(path, headers={"Host": "evil.example"})
            assert refused.status_code == 421, (path, refused.text)
            assert "'evil.example' is not this host's address" in refused.json()["error"]
        assert client.get("/approvals", headers={"Host": f"evil.example:{served.port}"}).status_code == 421
        assert client.post("/approvals/a1", json={"decision": "allow"}, headers={"Host": "evil.example"}).status_code == 421
        # Another site's page: its Origin is refused on state changes and the event stream.
        for origin in ("http://evil.example", f"http://evil.example:{served.port}", "null", f"http://127.0.0.1:{served.port + 1}"):
            post = client.post("/approvals/a1", json={"decision": "allow"}, headers={"Origin": origin})
            assert post.status_code == 403 and "cross-origin request refused" in post.json()["error"], (origin, post.text)
            assert client.post("/sessions/s/steer", json={"text": "x"}, headers={"Origin": origin}).status_code == 403
            assert client.get("/sessions/s/events", headers={"Origin": origin}).status_code == 403
        # The host's own names, with or without its own Origin, and CLI clients without one.
        for name in ("127.0.0.1", "localhost", "[::1]"):
            own = {"Host": f"{name}:{served.port}", "Origin": f"http://{name}:{served.port}"}
            assert client.post("/approvals/a1", json={"decision": "allow"}, headers=own).status_code == 404
            assert client.get("/approvals", headers={"Host": own["Host"]}).status_code == 200
        assert client.get("/ui/sessions/s").status_code == 200
    cli = run_agent("approvals", "list", "--url", served.url, env=ENV)
    assert cli.returncode == 0 and json.loads(cli.stdout) == {"approvals": []}, cli.stderr


def test_allowed_hosts_and_the_body_cap_are_configurable(configured: Served) -> None:
    auth = {"Authorization": f"Bearer {APPROVER}"}
    with httpx.Client(base_url=configured.url, headers=auth) as client:
        for host in ("agent.example", f"agent.example:{configured.port}"):
            assert client.get("/approvals", headers={"Host": host}).status_code == 200
        origin = {"Host": f"agent.example:{configured.port}", "Origin": f"https://agent.example:{configured.port}"}
        assert client.post("/approvals/a1", json={"decision": "allow"}, headers=origin).status_code == 404
        assert client.get("/approvals", headers={"Host": "evil.example"}).status_code == 421
        too_large = client.post("/approvals/a1", json={"decision": "allow", "reason": "x" * 4096})
        assert too_large.status_code == 413 and "at most 2048 bytes" in too_large.json()["error"]
        assert client.post("/approvals/a1", json={"decision": "allow", "reason": "x" * 100}).status_code == 404


@pytest.mark.parametrize(("flags", "message"), [
    (("--api-allowed-host", "http://agent.example/"), "--api-allowed-host: 'http://agent.example/' is not NAME or NAME:PORT (no scheme, path or spaces)"),
    (("--api-max-body-bytes", "10"), "--api-max-body-bytes: Input should be greater than or equal to 1024"),
])
def test_bad_guard_flags_are_one_line_errors(tmp_path: Path, flags: tuple[str, str], message: str) -> None:
    result = run_agent("approvals", "serve", "--store", str(tmp_path / "s.db"), "--port", str(free_port()), *flags,
                       env=ENV, timeout=30)
    assert result.returncode == 2 and result.stderr.strip() == f"dex-agent: {message}", result.stderr
