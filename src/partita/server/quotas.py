"""Client quotas, as Kafka's ``ClientQuotaManager`` keeps them: produce and fetch byte
rates and request-time percentages per user, client id, or both, with defaults.

Which quota applies to a request (KIP-55's order, per quota key; the first entity that
sets the key wins):

    user=U,client-id=C   user=U,client-id=<default>   user=U
    user=<default>,client-id=C   user=<default>,client-id=<default>   user=<default>
    client-id=C   client-id=<default>

The rate is counted per matched entity with its defaults filled in (``user=<default>``
gives every user a rate of their own). A rate is Kafka's sampled one: what was recorded
in the last ``quota.window.num`` windows of ``quota.window.size.seconds``, over the time
they span (never less than all but one window, so a new client is not throttled by its
first burst alone). Over its quota, a client is told to wait ``(rate - quota) / quota *
window`` ms: the time after which its rate is back at the quota. The broker returns that
as ``throttle_time_ms`` and does not read the connection's next request until it has
passed, as Kafka mutes the channel.

Sans-IO: the network shell records and applies; nothing here touches a socket.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from partita.cluster.layout import QuotaEntity

PRODUCE, FETCH, REQUEST = "producer_byte_rate", "consumer_byte_rate", "request_percentage"


@dataclass(slots=True)
class _Rate:
    """Kafka's SampledStat Rate over ``samples`` windows of ``window`` seconds."""

    window: float
    samples: int
    recorded: deque[list[float]] = field(default_factory=deque)  # [window start, total]

    def record(self, value: float, now: float) -> None:
        recorded = self.recorded
        if not recorded or now - recorded[-1][0] >= self.window:
            recorded.append([now, 0.0])
        recorded[-1][1] += value
        self._expire(now)

    def _expire(self, now: float) -> None:
        horizon = now - self.window * self.samples
        while self.recorded and self.recorded[0][0] + self.window <= horizon:
            self.recorded.popleft()

    def window_size(self, now: float) -> float:
        self._expire(now)
        oldest = self.recorded[0][0] if self.recorded else now
        elapsed = now - oldest
        # At least all but one window: a client's first seconds are not judged alone.
        return max(elapsed, self.window * (self.samples - 1))

    def value(self, now: float) -> float:
        return sum(total for _start, total in self.recorded) / self.window_size(now)


@dataclass(frozen=True, slots=True)
class Quota:
    """The quota that applies to a client: its bound and the key its rate is kept under."""

    bound: float
    sensor: tuple[str, str, str]  # (quota key, user or "", client id or "")


class QuotaManager:
    def __init__(
        self,
        window_s: float = 1.0,
        samples: int = 11,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.window = window_s
        self.samples = samples
        self.clock = clock
        self._quotas: dict[str, dict[QuotaEntity, float]] = {}
        self._rates: dict[tuple[str, str, str], _Rate] = {}

    @property
    def enabled(self) -> bool:
        """Whether any quota is set: with none, the broker records nothing at all."""
        return bool(self._quotas)

    def load(self, configs: Iterable[tuple[QuotaEntity, dict[str, float]]]) -> None:
        quotas: dict[str, dict[QuotaEntity, float]] = {}
        for entity, values in configs:
            for key, bound in values.items():
                quotas.setdefault(key, {})[entity] = bound
        self._quotas = quotas
        # Rates of sensors no quota names any more are dropped; the others keep counting.
        self._rates = {sensor: rate for sensor, rate in self._rates.items() if sensor[0] in quotas}

    def quota(self, key: str, user: str, client_id: str) -> Quota | None:
        by_entity = self._quotas.get(key)
        if not by_entity:
            return None
        user_part, client_part = ("user", user), ("client-id", client_id)
        default_user, default_client = ("user", None), ("client-id", None)
        for entity in (
            (user_part, client_part),
            (user_part, default_client),
            (user_part,),
            (default_user, client_part),
            (default_user, default_client),
            (default_user,),
            (client_part,),
            (default_client,),
        ):
            bound = by_entity.get(entity)
            if bound is not None:
                types = {kind for kind, _name in entity}
                sensor = (
                    key,
                    user if "user" in types else "",
                    client_id if "client-id" in types else "",
                )
                return Quota(bound, sensor)
        return None

    def record(self, key: str, user: str, client_id: str, value: float) -> int:
        """Count ``value`` against the client's quota of ``key``; the throttle time (ms)
        it has earned, 0 within its quota or without one."""
        quota = self.quota(key, user, client_id)
        if quota is None:
            return 0
        now = self.clock()
        rate = self._rates.get(quota.sensor)
        if rate is None:
            rate = self._rates[quota.sensor] = _Rate(self.window, self.samples)
        rate.record(value, now)
        observed = rate.value(now)
        if observed <= quota.bound:
            return 0
        throttle = (observed - quota.bound) / quota.bound * rate.window_size(now) * 1000
        # Rounded up: a client that waits exactly this long is back within its quota
        # (rounded down, its next fetch was a hair over and answered empty again).
        # Bounded by the span the rate is measured over, as Kafka bounds it
        # (QuotaUtils.boundedThrottleTime): a tiny quota mutes a client for seconds at a
        # time, not for hours, and it still cannot get more through than its quota.
        return min(math.ceil(throttle), math.ceil(self.window * self.samples * 1000))
