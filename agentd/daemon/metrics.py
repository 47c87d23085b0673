"""`GET /metrics`: the daemon's counters and histograms in Prometheus text (prometheus-client).

One registry per daemon, never the library's global default, so a process can hold
several daemons (the tests do) without their series mixing. Counters and histograms
are fed as things happen (a run committed, a model call, a store commit); the gauges
(agents by status, conversations waiting, channel states) are read from the fleet at
each scrape, so they can never drift from what `GET /agents` shows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agentd.store.records import RunRecord

# A turn is a model call or a few (plus tools): tens of milliseconds offline, up to minutes remote.
TURN_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
# A group commit is one transaction on the store thread: well under a millisecond to a slow fsync
# (on PostgreSQL a write batch's transaction: a round trip or two to the database).
COMMIT_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)
NO_CHANNEL = "none"  # a run that belongs to no conversation (a sweep, say)


class AgentGauges(Protocol):
    """What a scrape reads about one agent of the fleet."""

    @property
    def status(self) -> str: ...

    @property
    def conversations_waiting(self) -> int: ...

    def channel_states(self) -> list[dict[str, object]]: ...


def channel_of(conversation_key: str | None) -> str:
    """The channel a conversation key belongs to: `webhook` for webhook:t-1 (keys are <channel>:<id>)."""
    return conversation_key.split(":", 1)[0] if conversation_key else NO_CHANNEL


class Metrics:
    """The daemon's series; `agents()` gives the fleet at scrape time, by agent name, and `held()` what
    the process holds for all of them (Resources.stats: open files, the hot threads' cache)."""

    def __init__(
        self,
        agents: Callable[[], Mapping[str, AgentGauges]],
        held: Callable[[], Mapping[str, Any]] = dict,
    ):
        self.registry = r = CollectorRegistry()

        def counter(name: str, labels: tuple[str, ...], doc: str) -> Counter:
            return Counter(name, doc, labels, registry=r)

        def histogram(name: str, labels: tuple[str, ...], buckets: tuple[float, ...], doc: str) -> Histogram:
            return Histogram(name, doc, labels, buckets=buckets, registry=r)

        self.turns = counter(
            "agentd_turns",
            ("agent", "channel", "outcome"),
            "Message turns answered, by agent, channel and outcome (ok, error, stopped).",
        )
        self.scheduled_runs = counter(
            "agentd_scheduled_runs",
            ("agent", "outcome"),
            "Runs of scheduled jobs and heartbeats (trigger schedule), by agent and outcome (ok, error).",
        )
        self.commands = counter(
            "agentd_commands",
            ("agent", "channel"),
            "Commands (/new, /status, ...) run, by agent and channel.",
        )
        self.memory_runs = counter(
            "agentd_memory_runs",
            ("agent", "trigger", "outcome"),
            "Memory runs (compaction, summary, fold, extraction, ...) by agent, trigger and outcome.",
        )
        self.tokens = counter(
            "agentd_tokens",
            ("agent", "direction"),
            "Model tokens by agent and direction (in, out); estimated when the provider reports none.",
        )
        self.fallbacks = counter(
            "agentd_model_fallbacks",
            ("agent", "model", "reason"),
            "Model calls passed on to the next model of a fallback chain, by agent, the model that failed "
            "(or was skipped while its breaker is open: reason paused) and why.",
        )
        self.overflows = counter(
            "agentd_context_overflows",
            ("agent", "model", "trigger", "recovery"),
            "Prompts past a model's context window, recovered: by agent, the provider/model, trigger (window:"
            " caught before the call; overflow: the provider refused it) and recovery (compaction, left_out).",
        )
        self.turn_seconds = histogram(
            "agentd_turn_duration_seconds",
            ("channel",),
            TURN_BUCKETS,
            "Message turns (the prompt, model calls and tools; their commit is a store commit), by channel.",
        )
        self.model_call_seconds = histogram(
            "agentd_model_call_duration_seconds",
            ("provider", "purpose", "outcome"),
            TURN_BUCKETS,
            "Model calls (retries included) by provider, purpose (chat, summary, ...) and outcome.",
        )
        self.store_commit_seconds = histogram(
            "agentd_store_commit_duration_seconds",
            (),
            COMMIT_BUCKETS,
            "Store transactions (one group commit of one agent file on the store thread; on PostgreSQL,"
            " one write batch's transaction).",
        )
        # usage as the meter counts it (agentd/engine/metering.py); estimated="true": no reported usage
        self.spend_tokens = counter(
            "agentd_usage_tokens",
            ("agent", "model", "trigger", "direction", "estimated"),
            "Model tokens charged, by agent, model, trigger and direction (in, out).",
        )
        self.spend_dollars = counter(
            "agentd_usage_cost_dollars",
            ("agent", "model", "trigger", "estimated"),
            "Model spend in dollars at the configured prices, by agent, model and trigger.",
        )
        self.budget_refusals = counter(
            "agentd_budget_refusals",
            ("agent", "per"),
            "Model calls refused by a budget, by agent and budget scope.",
        )
        self.rate_limited = counter(
            "agentd_rate_limited",
            ("agent", "per"),
            "Events dropped over a rate limit, by agent and limit scope.",
        )
        r.register(_FleetCollector(agents))
        r.register(_HeldCollector(held))

    # -- fed as things happen -------------------------------------------------------------------

    def run_committed(self, agent: str, run: RunRecord) -> None:
        outcome = run.status
        if run.trigger == "message":
            channel = channel_of(run.conversation_key)
            self.turns.labels(agent, channel, outcome).inc()
            if run.duration_ms is not None:
                self.turn_seconds.labels(channel).observe(run.duration_ms / 1000)
        elif run.trigger == "command":
            self.commands.labels(agent, channel_of(run.conversation_key)).inc()
        elif run.trigger == "schedule":
            self.scheduled_runs.labels(agent, outcome).inc()
        else:
            self.memory_runs.labels(agent, run.trigger, outcome).inc()
        if run.input_tokens:
            self.tokens.labels(agent, "in").inc(run.input_tokens)
        if run.output_tokens:
            self.tokens.labels(agent, "out").inc(run.output_tokens)

    def spent(
        self,
        agent: str,
        model: str,
        trigger: str,
        tokens_in: int,
        tokens_out: int,
        micros: int,
        estimated: bool,
    ) -> None:
        flag = "true" if estimated else "false"
        self.spend_tokens.labels(agent, model, trigger, "in", flag).inc(tokens_in)
        self.spend_tokens.labels(agent, model, trigger, "out", flag).inc(tokens_out)
        self.spend_dollars.labels(agent, model, trigger, flag).inc(micros / 1_000_000)

    def model_call(self, provider: str, purpose: str, seconds: float, outcome: str) -> None:
        self.model_call_seconds.labels(provider, purpose, outcome).observe(seconds)

    def model_fallback(self, agent: str, from_model: str, reason: str) -> None:
        self.fallbacks.labels(agent, from_model, reason).inc()

    def model_overflow(self, agent: str, model: str, trigger: str, recovery: str) -> None:
        self.overflows.labels(agent, model, trigger, recovery).inc()

    def store_commit(self, seconds: float) -> None:
        """Called on the store thread (prometheus-client's metrics are thread-safe)."""
        self.store_commit_seconds.observe(seconds)

    # -- read at scrape time ---------------------------------------------------------------------

    def exposition(self) -> tuple[bytes, str]:
        """The body of GET /metrics and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class _FleetCollector(Collector):
    def __init__(self, agents: Callable[[], Mapping[str, AgentGauges]]):
        self._agents = agents

    def collect(self) -> Iterator[GaugeMetricFamily]:
        agents = dict(self._agents())
        by_status = GaugeMetricFamily(
            "agentd_agents", "Agents by status (running, error, stopped, ...).", labels=["status"]
        )
        waiting = GaugeMetricFamily(
            "agentd_conversations_waiting",
            "Conversations with messages queued behind the one being answered, by agent.",
            labels=["agent"],
        )
        channels = GaugeMetricFamily(
            "agentd_channel_state",
            "1 for each channel's current state (starting, running, reconnecting, failed, stopped).",
            labels=["agent", "channel", "state"],
        )
        counts: dict[str, int] = {}
        for name, agent in sorted(agents.items()):
            counts[agent.status] = counts.get(agent.status, 0) + 1
            waiting.add_metric([name], agent.conversations_waiting)
            for channel in agent.channel_states():
                channels.add_metric([name, str(channel["name"]), str(channel["status"])], 1)
        for status, count in sorted(counts.items()):
            by_status.add_metric([status], count)
        yield by_status
        yield waiting
        yield channels


class _HeldCollector(Collector):
    """The hot threads' cache (bytes against the budget, hits, misses, evictions) and the open files."""

    def __init__(self, held: Callable[[], Mapping[str, Any]]):
        self._held = held

    def collect(self) -> Iterator[Metric]:
        held = self._held()
        hot, files = held.get("hot_threads"), held.get("files")
        if hot:
            yield GaugeMetricFamily(
                "agentd_hot_threads_bytes", "Bytes of transcripts kept in memory, all agents.", hot["bytes"]
            )
            yield GaugeMetricFamily(
                "agentd_hot_threads_budget_bytes",
                "The hot threads' budget (store.hot_cache_mb).",
                hot["budget_bytes"],
            )
            lookups = CounterMetricFamily(
                "agentd_hot_threads_lookups",
                "Threads looked up in memory, by result (hit, miss).",
                labels=["result"],
            )
            lookups.add_metric(["hit"], hot["hits"])
            lookups.add_metric(["miss"], hot["misses"])
            yield lookups
            yield CounterMetricFamily(
                "agentd_hot_threads_evictions",
                "Threads dropped from memory to keep to the budget.",
                hot["evictions"],
            )
        if files:
            yield GaugeMetricFamily("agentd_open_files", "Agent data files open now.", files["open"])
            yield GaugeMetricFamily(
                "agentd_open_files_max", "At most this many open at once.", files["max_open"]
            )
