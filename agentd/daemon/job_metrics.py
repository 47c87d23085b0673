"""The scheduler's series on `GET /metrics`, in the daemon's registry (agentd/daemon/metrics.py):
fires by outcome, how late they ran, missed fires, deliveries by outcome, and deliveries waiting."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# a fire is due to the second; late by its queue (many at once), a lease handed over, a restart
LATENESS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 1800, 3600)


class JobMetrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        r = registry if registry is not None else CollectorRegistry()
        self.fires = Counter(
            "agentd_job_fires",
            "Job fires, by agent, trigger (schedule, catch_up, manual) and status (ok, error, silent, "
            "skipped, taken: another daemon fired it first, crashed: nothing kept, tried again).",
            ("agent", "trigger", "status"),
            registry=r,
        )
        self.lateness = Histogram(
            "agentd_job_fire_lateness_seconds",
            "How long after its time a fire started.",
            buckets=LATENESS_BUCKETS,
            registry=r,
        )
        self.missed_fires = Counter(
            "agentd_job_missed_fires", "Fires missed while no daemon ran, by agent.", ("agent",), registry=r
        )
        self.deliveries = Counter(
            "agentd_job_deliveries",
            "Delivery attempts, by agent and outcome (sent, retry, failed: given up).",
            ("agent", "outcome"),
            registry=r,
        )
        self.pending = Gauge(
            "agentd_job_deliveries_pending",
            "Deliveries waiting to be sent (as this daemon last counted them), by agent.",
            ("agent",),
            registry=r,
        )

    def fired(self, agent: str, trigger: str, status: str, late_s: float) -> None:
        self.fires.labels(agent, trigger, status).inc()
        if status not in ("taken", "crashed") and trigger != "manual":
            self.lateness.observe(max(0.0, late_s))

    def missed(self, agent: str, count: int) -> None:
        self.missed_fires.labels(agent).inc(count)

    def delivered(self, agent: str, outcome: str) -> None:
        self.deliveries.labels(agent, outcome).inc()
