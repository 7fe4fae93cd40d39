"""A tiny authorization server's public side on loopback, for resource-server tests: its OpenID
discovery document and its JWKS, served over real HTTP by a thread, with keys made here and tokens
signed here (so tests can make bad ones too). It counts the JWKS fetches; `rotate` replaces the
keys it serves. It also introspects opaque tokens (RFC 7662, `POST /introspect` with HTTP Basic
client credentials): those put in `opaque` are active, with their claims.

    with JwksIssuer() as idp:
        key = idp.add_key("k1")                      # RS256 by default
        token = idp.token(key, sub="alice", aud=resource, scope="mcp", groups=["finance"])
        idp.jwks_fetches                             # how often the JWKS was read
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes


@dataclass
class SigningKey:
    kid: str
    alg: str
    private: PrivateKeyTypes

    def public_jwk(self) -> dict[str, Any]:
        algorithm = jwt.algorithms.RSAAlgorithm if self.alg.startswith(("RS", "PS")) else jwt.algorithms.ECAlgorithm
        jwk = json.loads(algorithm.to_jwk(self.private.public_key()))  # type: ignore[union-attr]
        return {**jwk, "kid": self.kid, "use": "sig", "alg": self.alg}

    def public_pem(self) -> bytes:
        return self.private.public_key().public_bytes(  # type: ignore[union-attr]
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def make_key(kid: str, alg: str = "RS256") -> SigningKey:
    """A fresh key pair (RSA 2048 for RS*/PS*, EC P-256 for ES256)."""
    private: PrivateKeyTypes = (rsa.generate_private_key(public_exponent=65537, key_size=2048)
                                if alg.startswith(("RS", "PS")) else ec.generate_private_key(ec.SECP256R1()))
    return SigningKey(kid, alg, private)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class JwksIssuer:
    def __init__(self) -> None:
        self.keys: list[SigningKey] = []
        self.jwks_fetches = 0
        self.metadata_fetches = 0
        self.opaque: dict[str, dict[str, Any]] = {}
        self.introspections = 0
        self.client = ("dex-gateway", "introspection-secret-3b9")
        self._lock = threading.Lock()
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server API
                if self.path == "/.well-known/openid-configuration":
                    with issuer._lock:
                        issuer.metadata_fetches += 1
                    body = {"issuer": issuer.url, "jwks_uri": f"{issuer.url}/jwks",
                            "token_endpoint": f"{issuer.url}/token", "authorization_endpoint": f"{issuer.url}/auth"}
                elif self.path == "/jwks":
                    with issuer._lock:
                        issuer.jwks_fetches += 1
                        body = {"keys": [k.public_jwk() for k in issuer.keys]}
                else:
                    self.send_error(404)
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:  # noqa: N802 - the http.server API
                length = int(self.headers.get("content-length") or 0)
                form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
                expected = "Basic " + base64.b64encode(":".join(issuer.client).encode()).decode()
                if self.path != "/introspect" or self.headers.get("authorization") != expected:
                    self.send_error(401 if self.path == "/introspect" else 404)
                    return
                with issuer._lock:
                    issuer.introspections += 1
                    claims = issuer.opaque.get(form.get("token", ""))
                data = json.dumps({"active": True, **claims} if claims else {"active": False}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "JwksIssuer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def add_key(self, kid: str, alg: str = "RS256") -> SigningKey:
        key = make_key(kid, alg)
        with self._lock:
            self.keys.append(key)
        return key

    def rotate(self, *keys: SigningKey) -> None:
        """Serve exactly these keys from now on (the others are revoked)."""
        with self._lock:
            self.keys = list(keys)

    def claims(self, *, sub: str, aud: str | list[str], lifetime: float = 300, **extra: Any) -> dict[str, Any]:
        now = int(time.time())
        return {"iss": self.url, "sub": sub, "aud": aud, "iat": now, "exp": now + int(lifetime), "jti": f"{sub}-{now}",
                **extra}

    def token(self, key: SigningKey, *, headers: dict[str, Any] | None = None, **claims: Any) -> str:
        payload = claims if "iss" in claims else self.claims(**claims)  # whole claims, or made here
        return jwt.encode(payload, key.private, algorithm=key.alg,  # type: ignore[arg-type]
                          headers={"kid": key.kid, "typ": "at+jwt", **(headers or {})})


def unsigned_token(header: dict[str, Any], payload: dict[str, Any], secret: bytes | None = None) -> str:
    """A JWT made by hand: `alg: none` (no signature) or HS256 with `secret` as the HMAC key (what
    PyJWT refuses to make with a public key: the algorithm-confusion attack)."""
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}"
    if secret is None:
        return signing_input + "."
    return signing_input + "." + b64(hmac.new(secret, signing_input.encode(), hashlib.sha256).digest())
