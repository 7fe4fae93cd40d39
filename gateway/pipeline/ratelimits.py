"""tools/call rate limits: a token bucket per principal and per upstream.

    limits = RateLimits.from_config(config, metrics)   # NO_LIMITS when nothing is configured
    await limits.admit(principal, upstream)            # or raises RateLimited

A call takes one token from its principal's bucket and one from its upstream's, both or neither.
A refused call is answered with a JSON-RPC error (`RATE_LIMITED`) whose message and data say
when to retry; it was not sent anywhere and claimed no fence, so the retry is a new call.

Buckets live in this process by default. With `rate_limits.redis_url` they live in Redis and
one Lua script checks and takes the tokens atomically on the server's clock, so N replicas share
each bucket and together never grant more than it holds. If Redis cannot be reached the call is
limited by this process's own buckets (a warning is logged): the limit then holds per replica.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..config.model import GatewayConfig, RateConfig
from ..errors import ConfigError, RateLimited

if TYPE_CHECKING:
    from ..telemetry.metrics import GatewayMetrics

__all__ = ["NO_LIMITS", "LocalBuckets", "RateLimits", "RedisBuckets"]

logger = logging.getLogger(__name__)

_REDIS_WARN_EVERY = 60.0


@dataclass(frozen=True, slots=True)
class Bucket:
    key: str  # unique per bucket: "p:<principal>" or "u:<upstream>"
    kind: str  # "principal" or "upstream" (the metric's label, the error's data)
    name: str
    rate: RateConfig


class BucketStore(Protocol):
    async def take(self, buckets: Sequence[Bucket]) -> tuple[float, int]:
        """Take one token from each bucket, all or none: (0.0, -1), or the seconds until all
        could and the index of the bucket that needs longest."""
        ...

    async def aclose(self) -> None: ...


class LocalBuckets:
    """Buckets in this process (no await between the check and the take: atomic on the loop)."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self._clock = clock
        self._state: dict[str, tuple[float, float]] = {}  # key -> (tokens, at)

    async def take(self, buckets: Sequence[Bucket]) -> tuple[float, int]:
        return self.take_now(buckets)

    def take_now(self, buckets: Sequence[Bucket]) -> tuple[float, int]:
        now = self._clock()
        levels: list[float] = []
        wait, worst = 0.0, -1
        for index, bucket in enumerate(buckets):
            capacity, rate = bucket.rate.capacity, bucket.rate.per_second
            tokens, at = self._state.get(bucket.key, (capacity, now))
            tokens = min(capacity, tokens + max(0.0, now - at) * rate)
            levels.append(tokens)
            if tokens < 1.0 and (1.0 - tokens) / rate > wait:
                wait, worst = (1.0 - tokens) / rate, index
        if wait > 0:
            return wait, worst
        for bucket, tokens in zip(buckets, levels):
            self._state[bucket.key] = (tokens - 1.0, now)
        return 0.0, -1

    async def aclose(self) -> None:
        self._state.clear()


# KEYS: bucket keys. ARGV: per_second and capacity of each key, in order. Returns "0 0" when
# every bucket gave a token, else "<seconds until all could> <1-based key that needs longest>"
# (a string: Lua numbers reach the client as integers). The clock is the Redis server's, the same for every replica.
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local levels = {}
local wait = 0
local worst = 0
for i = 1, #KEYS do
  local rate = tonumber(ARGV[2 * i - 1])
  local cap = tonumber(ARGV[2 * i])
  local v = redis.call('HMGET', KEYS[i], 'tokens', 'at')
  local tokens = tonumber(v[1])
  local at = tonumber(v[2])
  if tokens == nil or at == nil then
    tokens = cap
    at = now
  end
  tokens = math.min(cap, tokens + math.max(0, now - at) * rate)
  levels[i] = tokens
  if tokens < 1 and (1 - tokens) / rate > wait then
    wait = (1 - tokens) / rate
    worst = i
  end
end
if wait > 0 then
  return tostring(wait) .. ' ' .. tostring(worst)
end
for i = 1, #KEYS do
  local rate = tonumber(ARGV[2 * i - 1])
  local cap = tonumber(ARGV[2 * i])
  redis.call('HSET', KEYS[i], 'tokens', tostring(levels[i] - 1), 'at', tostring(now))
  redis.call('PEXPIRE', KEYS[i], math.ceil(cap / rate * 1000) + 1000)
end
return '0 0'
"""


class RedisBuckets:
    """Buckets in Redis (redis-py's asyncio client), shared by every replica."""

    def __init__(self, url: str, prefix: str, *, fallback: LocalBuckets | None = None) -> None:
        try:
            import redis.asyncio as redis  # only a configured Redis URL loads the client
        except ImportError:
            raise ConfigError(
                "rate_limits.redis_url is set, but the Redis client is not installed: "
                "pip install 'dex-mcp-gateway[redis]'"
            ) from None

        self._redis = redis.Redis.from_url(url, socket_connect_timeout=1.0, socket_timeout=1.0)
        self._script = self._redis.register_script(_TAKE)
        self._prefix = prefix
        self._fallback = fallback or LocalBuckets()
        self._warned_at = float("-inf")

    async def take(self, buckets: Sequence[Bucket]) -> tuple[float, int]:
        args: list[float] = []
        for bucket in buckets:
            args.extend((bucket.rate.per_second, bucket.rate.capacity))
        try:
            raw = await self._script(keys=[self._prefix + b.key for b in buckets], args=args)
        except Exception as exc:  # noqa: BLE001 - any Redis failure (down, timeout, script error): limit locally
            now = time.monotonic()
            if now - self._warned_at > _REDIS_WARN_EVERY:
                self._warned_at = now
                logger.warning("rate limits: Redis did not answer (%s); limiting per process meanwhile", exc)
            return self._fallback.take_now(buckets)
        wait, worst = (raw.decode() if isinstance(raw, bytes) else str(raw)).split()
        return float(wait), int(worst) - 1

    async def aclose(self) -> None:
        await self._redis.aclose()


class RateLimits:
    def __init__(
        self,
        store: BucketStore | None,
        *,
        per_principal: RateConfig | None = None,
        principals: Mapping[str, RateConfig] | None = None,
        upstreams: Mapping[str, RateConfig] | None = None,
        metrics: "GatewayMetrics | None" = None,
    ) -> None:
        self._store = store
        self._per_principal = per_principal
        self._principals = dict(principals or {})
        self._upstreams = dict(upstreams or {})
        self._metrics = metrics
        self._active = store is not None and bool(per_principal or self._principals or self._upstreams)

    @classmethod
    def from_config(cls, config: GatewayConfig, metrics: "GatewayMetrics | None" = None) -> "RateLimits":
        limits = config.rate_limits
        principals = {t.principal: t.rate_limit for t in config.auth.tokens if t.rate_limit is not None}
        upstreams = {u.name: u.rate_limit for u in config.upstreams if u.rate_limit is not None}
        if limits.per_principal is None and not principals and not upstreams:
            return NO_LIMITS
        store: BucketStore = RedisBuckets(limits.redis_url, limits.redis_prefix) if limits.redis_url else LocalBuckets()
        return cls(store, per_principal=limits.per_principal, principals=principals, upstreams=upstreams, metrics=metrics)

    async def admit(self, principal: str, upstream: str | None) -> None:
        """Take a token for one call, or raise RateLimited (the call must not be sent)."""
        if not self._active:
            return
        buckets: list[Bucket] = []
        rate = self._principals.get(principal, self._per_principal)
        if rate is not None:
            buckets.append(Bucket("p:" + principal, "principal", principal, rate))
        if upstream is not None and (rate := self._upstreams.get(upstream)) is not None:
            buckets.append(Bucket("u:" + upstream, "upstream", upstream, rate))
        if not buckets:
            return
        assert self._store is not None
        wait, worst = await self._store.take(buckets)
        if wait <= 0:
            return
        bucket = buckets[worst]
        if self._metrics is not None:
            self._metrics.rate_limited.labels(bucket.kind).inc()
        raise RateLimited(bucket.kind, bucket.name, bucket.rate.per_second, bucket.rate.capacity, wait)

    async def aclose(self) -> None:
        if self._store is not None:
            await self._store.aclose()


NO_LIMITS = RateLimits(None)
