"""The store URLs the gateway's databases share (`fences.store`): one parser for every store.

    sqlite:///relative.db   sqlite:////absolute.db   (?option=value...)
    postgresql://user@host:5432/db?schema=NAME&pool_min=N&pool_max=N   (the rest goes to asyncpg)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


@dataclass(frozen=True)
class SqliteUrl:
    path: str
    options: dict[str, str]


@dataclass(frozen=True)
class PostgresUrl:
    dsn: str  # without the gateway's own options
    schema: str
    pool_min: int | None
    pool_max: int | None


def parse_sqlite_url(url: str) -> SqliteUrl:
    rest = url.split("://", 1)[1]
    rest, _, query = rest.partition("?")
    # sqlite:///rel.db -> "/rel.db" -> "rel.db"; sqlite:////abs.db -> "//abs.db" -> "/abs.db"
    if not rest.startswith("/") or len(rest) < 2:
        raise ValueError(f"a sqlite store URL needs a path: sqlite:///relative.db or sqlite:////abs.db, got {url!r}")
    return SqliteUrl(rest[1:], dict(parse_qsl(query)))


def parse_postgres_url(url: str) -> PostgresUrl:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    schema = query.pop("schema", "public")
    if not _IDENT.match(schema):
        raise ValueError(f"invalid PostgreSQL schema name {schema!r}")
    pool_min = query.pop("pool_min", None)
    pool_max = query.pop("pool_max", None)
    dsn = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), parts.fragment))
    return PostgresUrl(
        dsn, schema, int(pool_min) if pool_min is not None else None, int(pool_max) if pool_max is not None else None
    )
