"""`dex-agent login` / `logout`: a person at a terminal gets the host its gateway token (OAuth device login,
RFC 8628). It prints where to go and the code to enter, waits for the approval, and keeps the
tokens beside the session store (`<store>-login.json`, mode 0600); later `run`/`chat`/`demo` send
that token and renew it with its refresh token before it expires. `logout` revokes the refresh token
at the issuer (when it offers revocation) and deletes the kept login."""

from __future__ import annotations

import argparse
import sys

import anyio

from ..domain.credentials import issuer_settings
from ..domain.safe_text import terminal_text
from ..gateway_client.credential import CredentialError
from ..gateway_client.issuer import (IssuerClient, LoginRecord, device_login, discover, issuer_of_resource,
                                     load_login, login_path, revoke, save_login)
from ..store.session_store import store_path

__all__ = ["login", "logout"]


def login(args: argparse.Namespace) -> int:
    settings = issuer_settings(args)
    if not settings.client_id:
        raise ValueError("login needs the OAuth client id ($DEX_AGENT_CLIENT_ID or --client-id): a public client "
                         "that may use the device flow")
    path = login_path(store_path(args.store))

    def announce(uri: str, code: str, complete: str | None) -> None:
        print(f"To sign in, open {terminal_text(uri, 500)} and enter the code {terminal_text(code, 64)}", flush=True)
        if complete:
            print(f"(or open {terminal_text(complete, 600)})", flush=True)
        print("Waiting for the approval...", flush=True)

    async def go() -> int:
        issuer = settings.issuer or await issuer_of_resource(args.gateway)
        endpoints = await discover(issuer)
        client = IssuerClient(endpoints.issuer, settings.client_id or "")
        tokens = await device_login(client, endpoints, resource=args.gateway, scope=settings.scope, announce=announce)
        save_login(path, LoginRecord(issuer=endpoints.issuer, token_endpoint=endpoints.token_endpoint,
                                     client_id=client.client_id, resource=args.gateway, scope=settings.scope,
                                     tokens=tokens))
        print(f"Logged in to {terminal_text(endpoints.issuer, 300)} for {terminal_text(args.gateway, 300)}; "
              f"the token is kept in {path}", flush=True)
        return 0

    try:
        return anyio.run(go)
    except CredentialError as exc:
        print(f"dex-agent: login failed: {exc}", file=sys.stderr, flush=True)
        return 1


def logout(args: argparse.Namespace) -> int:
    path = login_path(store_path(args.store))
    record = load_login(path)
    if record is None:
        print(f"Not logged in (no {path})", flush=True)
        return 0

    async def go() -> bool:
        refresh = record.tokens.refresh_token
        if not refresh:
            return False
        return await revoke(IssuerClient(record.issuer, record.client_id), await discover(record.issuer), refresh)

    try:
        revoked = anyio.run(go)
    except CredentialError as exc:
        print(f"dex-agent: the issuer could not revoke the login ({exc}); deleting it here anyway", file=sys.stderr,
              flush=True)
        revoked = False
    path.unlink(missing_ok=True)
    print(f"Logged out: {path} deleted{'; the refresh token was revoked at the issuer' if revoked else ''}", flush=True)
    return 0
