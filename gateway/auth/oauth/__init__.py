"""The gateway as an OAuth 2.1 resource server (docs/auth.md), one job per module.

    fetch.py          one bounded JSON fetch from an issuer (metadata, JWKS, introspection)
    keys.py           each issuer's signing keys: discovered, cached, refetched on an unknown kid
    introspection.py  RFC 7662 for opaque tokens
    verifier.py       a bearer token -> the caller's Identity, or TokenRefused with the reason
"""

from __future__ import annotations

from .verifier import OAuthVerifier

__all__ = ["OAuthVerifier"]
