"""The daemon's meter and rate limiter, over its own store (agentd.engine.metering, .rate_limits)."""

from __future__ import annotations

from agentd.clock import SYSTEM_CLOCK, Clock
from agentd.config.budgets import price_table
from agentd.config.models import DaemonSpec
from agentd.daemon.metrics import Metrics
from agentd.engine.metering import Meter
from agentd.engine.rate_limits import RateLimiter
from agentd.store.base import Store


def metering_for(
    settings: DaemonSpec, store: Store, metrics: Metrics | None, clock: Clock = SYSTEM_CLOCK
) -> tuple[Meter, RateLimiter | None]:
    """Every daemon counts usage; budgets and rate limits apply when agentd.yaml has some."""
    meter = Meter(
        store,
        settings.budgets,
        price_table(settings.prices),
        clock,
        on_spend=metrics.spent if metrics else None,
        on_refused=(lambda agent, spec, _: metrics.budget_refusals.labels(agent, spec.per).inc())
        if metrics
        else None,
    )
    limiter = None
    if settings.rate_limits:
        limiter = RateLimiter(
            store,
            settings.rate_limits,
            clock,
            (lambda agent, per: metrics.rate_limited.labels(agent, per).inc()) if metrics else None,
        )
    return meter, limiter
