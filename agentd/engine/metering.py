"""Every model call charged to whom it serves: budgets enforced before the call, usage counted after.

Whom a call serves is `SERVED` (a context variable): set when an event is handled (the person,
`event.who`, and the channel), it is inherited by everything that event sets off in its task and the
tasks it starts — tool loops, sub-agent calls, the memory work queued after the run — so all of those
are charged to the same person and agent without passing anything along. A scheduled job's run sets
it from its event's metadata (`trigger: schedule`, `job: <name>`), and its turn's calls count under
the run's own trigger.

Before a call its estimated cost (the prompt's estimated tokens and the call's output cap, at the
chain's dearest price) is reserved on every budget that applies (agentd.store.writes.ReserveSpend, in
the daemon's own store: one counter per budget, subject and period, shared by every daemon on
PostgreSQL). A budget whose counter has reached its limit refuses the call (`BudgetExceeded`), or,
with `on_exceed: small_model`, sends it to the agent's `model.small`. After the call the reservation
is settled with the usage the provider reported (estimated when it reported none), and the day's usage
row is counted. A call is admitted only while its counter is below the limit, and admitting adds its
estimate first, so concurrent calls together pass the limit by at most one call's estimate (when the
provider's count stays within the estimate).
"""

from __future__ import annotations

import contextvars
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from agentd.clock import SYSTEM_CLOCK, Clock
from agentd.config.budgets import DEFAULT_PRICES, MICROS, BudgetSpec
from agentd.errors import ModelPaused
from agentd.events import InboundEvent
from agentd.messages import estimate_tokens
from agentd.providers.base import Completion, CompletionRequest
from agentd.store.base import Store
from agentd.store.budget_writes import AddSpend, RecordUsage, ReserveSpend, SpendKey
from agentd.store.usage_rows import UsageRow
from agentd.store.writes import Write

DEFAULT_OUTPUT_ESTIMATE = 1024  # tokens reserved for a call's answer when it sets no max_output_tokens


@dataclass(frozen=True, slots=True)
class Served:
    """Whom a model call serves: the person (None: nobody, an agent's own upkeep), the channel, what
    started the run (message, schedule, ...) and the job when a scheduled job did."""

    who: str | None
    channel: str | None
    trigger: str = "message"
    job: str | None = None
    agent: str | None = None  # the agent the event went to (an embedding call knows no other way)


SERVED: contextvars.ContextVar[Served | None] = contextvars.ContextVar("agentd_served", default=None)


def serve(event: InboundEvent) -> None:
    """From here on in this task (and the tasks it starts), model calls are charged to the event's person;
    an event a scheduled job sends names its job (and trigger) in its metadata."""
    trigger, job = event.metadata.get("trigger", "message"), event.metadata.get("job")
    SERVED.set(Served(event.who, event.channel, str(trigger), None if job is None else str(job), event.agent))


class BudgetExceeded(ModelPaused):
    """A budget refused the call. `reply` says so to the person; `first` is true the first time this
    counter refuses (its row remembers it, for every daemon: later refusals are not said again). Memory
    work waits `retry_in` seconds, until the period resets."""

    def __init__(
        self, reply: str, *, model: str, retry_in: float, first: bool, spec: BudgetSpec, key: SpendKey
    ):
        super().__init__(reply, model=model, retry_in=retry_in)
        self.reply, self.first, self.spec, self.key = reply, first, spec, key

    def audit_data(self) -> dict[str, Any]:
        """The refusal's audit data: a person's counter names them as `user` (what an erasure of theirs
        erases, agentd.store.people.PERSON_FIELDS); an agent's, channel's or job's as `subject`."""
        whose = "user" if self.spec.per == "person" else "subject"
        return {
            "per": self.spec.per,
            "limit": self.spec.limit,
            "period": self.key.period,
            whose: self.key.subject,
        }


@dataclass(frozen=True, slots=True)
class Charge:
    """One budget's counter this call is charged on, and what the budget counts it in."""

    spec: BudgetSpec
    key: SpendKey
    money: bool
    resets_at: float


@dataclass
class Ticket:
    """A call's reservation: the charges checked (and what each reserved) and those only counted."""

    checked: list[tuple[Charge, int]]
    counted: list[Charge] = field(default_factory=list)
    served: Served | None = None


def period_of(spec: BudgetSpec, now: float) -> tuple[str, float]:
    """The budget's current period ("2026-12-02" or "2026-12", in its time zone) and when it ends."""
    local = datetime.fromtimestamp(now, ZoneInfo(spec.timezone))
    _, _, period = spec.amount()
    if period == "day":
        start = local.date()
        nxt = start + timedelta(days=1)
        name = start.isoformat()
    else:
        nxt = (local.date().replace(day=1) + timedelta(days=32)).replace(day=1)
        name = local.strftime("%Y-%m")
    ends = datetime(nxt.year, nxt.month, nxt.day, tzinfo=ZoneInfo(spec.timezone))
    return name, ends.timestamp()


def budget_id(spec: BudgetSpec) -> str:
    """What names a budget's counters: its scope, unit, period and zone (not its amount: raising a
    limit keeps what was spent)."""
    unit, _, period = spec.amount()
    return "|".join(
        (spec.per, spec.agent or "", spec.channel or "", spec.job or "", unit, period, spec.timezone)
    )


def _subject(spec: BudgetSpec, agent: str, served: Served | None) -> str | None:
    """Whose counter the call is charged on, or None when the budget does not cover this call."""
    who = served.who if served else None
    channel = served.channel if served else None
    job = served.job if served else None
    if spec.agent is not None and spec.agent != agent:
        return None
    if spec.channel is not None and spec.channel != channel:
        return None
    if spec.job is not None and spec.job != job:
        return None
    return {"person": who, "agent": agent, "channel": channel, "job": job}[spec.per]


def shown_limit(spec: BudgetSpec) -> str:
    unit, amount, _ = spec.amount()
    if unit == "money":
        dollars = amount / MICROS
        return f"${dollars:g}" if dollars == int(dollars) else f"${dollars:.2f}"
    return f"{amount:,} tokens"


def refusal_text(spec: BudgetSpec, resets_at: float) -> str:
    _, _, period = spec.amount()
    whose = {"person": "", "agent": "this agent's ", "channel": "this channel's ", "job": "this job's "}[
        spec.per
    ]
    local = datetime.fromtimestamp(resets_at, ZoneInfo(spec.timezone))
    when = "00:00" if period == "day" else f"00:00 on {local.date().isoformat()}"
    which = "today's" if period == "day" else "this month's"
    text = f"{whose}{which} limit of {shown_limit(spec)} is reached; it resets at {when} {spec.timezone}."
    return text[0].upper() + text[1:]


Spent = Callable[
    [str, str, str, int, int, int, bool], None
]  # agent, model, trigger, in, out, micros, estimated
Refused = Callable[[str, BudgetSpec, str], None]  # agent, budget, subject


class Meter:
    """The daemon's budgets and usage over its own store (see the module's docstring)."""

    def __init__(
        self,
        store: Store,
        budgets: Sequence[BudgetSpec] = (),
        prices: dict[str, tuple[float, float]] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        *,
        on_spend: Spent | None = None,
        on_refused: Refused | None = None,
    ):
        self.store = store
        self.budgets = list(budgets)
        self.prices = dict(DEFAULT_PRICES if prices is None else prices)
        self.clock = clock
        self._on_spend, self._on_refused = on_spend, on_refused

    def cost(self, ref: str, input_tokens: int, output_tokens: int) -> int:
        """Micro-dollars (a price per 1M tokens is micro-dollars per token), rounded up."""
        price_in, price_out = self.prices.get(ref, (0.0, 0.0))
        return math.ceil(input_tokens * price_in + output_tokens * price_out)

    async def call(
        self,
        agent: str,
        chains: tuple[Sequence[str], Sequence[str] | None],
        request: CompletionRequest,
        run: Callable[[Sequence[str]], Awaitable[tuple[Completion, str]]],
        trigger: str | None = None,
    ) -> tuple[Completion, str]:
        """`run(chain)` charged: on the main chain, or the small one (`chains[1]`) when a budget with
        on_exceed small_model is reached; BudgetExceeded when a budget refuses."""
        served = SERVED.get()
        estimate_in = estimate_tokens(len(request.system) + sum(m.char_count() for m in request.messages))
        estimate_out = request.max_output_tokens or DEFAULT_OUTPUT_ESTIMATE
        chain, small = chains
        ticket, chain = await self._reserve(agent, chain, small, estimate_in, estimate_out, served)
        try:
            completion, ref = await run(chain)
        except BaseException:
            if ticket.checked:
                await self.store.write(AddSpend([(c.key, -amount) for c, amount in ticket.checked]))
            raise
        if completion.usage is not None:
            used_in, used_out, estimated = (
                completion.usage.input_tokens,
                completion.usage.output_tokens,
                False,
            )
        else:
            used_in, used_out, estimated = estimate_in, estimate_tokens(completion.message.char_count()), True
        await self._settle(agent, ticket, ref, used_in, used_out, estimated, trigger)
        return completion, ref

    def charges(self, agent: str, served: Served | None, now: float) -> list[Charge]:
        """The budgets' counters a call for `agent` serving `served` is charged on now."""
        charges = []
        for spec in self.budgets:
            subject = _subject(spec, agent, served)
            if subject is None:
                continue
            unit, limit, _ = spec.amount()
            period, resets_at = period_of(spec, now)
            charges.append(
                Charge(spec, SpendKey(budget_id(spec), subject, period, limit), unit == "money", resets_at)
            )
        return charges

    async def _reserve(
        self,
        agent: str,
        chain: Sequence[str],
        small: Sequence[str] | None,
        estimate_in: int,
        estimate_out: int,
        served: Served | None,
    ) -> tuple[Ticket, Sequence[str]]:
        checked = self.charges(agent, served, self.clock.time())
        counted: list[Charge] = []
        while checked:
            money = max(self.cost(ref, estimate_in, estimate_out) for ref in chain)
            entries = [(c, money if c.money else estimate_in + estimate_out) for c in checked]
            [refused] = await self.store.write(ReserveSpend([(c.key, amount) for c, amount in entries]))
            if refused is None:
                return Ticket(entries, counted, served), chain
            index, first = refused
            charge = checked[index]
            if charge.spec.on_exceed == "small_model" and small and list(small) != list(chain):
                chain = small  # answered by the small model; the budget still counts what it spends
                counted.append(charge)
                checked = [c for c in checked if c is not charge]
                continue
            raise self._refusal(agent, charge, chain[0], first)
        return Ticket([], counted, served), chain

    def _refusal(self, agent: str, charge: Charge, model: str, first: bool) -> BudgetExceeded:
        key = charge.key
        if self._on_refused is not None:
            self._on_refused(agent, charge.spec, key.subject)
        return BudgetExceeded(
            refusal_text(charge.spec, charge.resets_at),
            model=model,
            retry_in=max(1.0, charge.resets_at - self.clock.time()),
            first=first,
            spec=charge.spec,
            key=key,
        )

    async def count(self, agent: str, ref: str, used_in: int, used_out: int, trigger: str) -> None:
        """A call that is counted but never refused (an embedding, which memory work cannot do without):
        its estimated usage joins the budgets' counters and the day's usage row."""
        charges = self.charges(agent, SERVED.get(), self.clock.time())
        await self._settle(agent, Ticket([], charges, SERVED.get()), ref, used_in, used_out, True, trigger)

    async def _settle(
        self,
        agent: str,
        ticket: Ticket,
        ref: str,
        used_in: int,
        used_out: int,
        estimated: bool,
        trigger: str | None,
    ) -> None:
        money = self.cost(ref, used_in, used_out)

        def actual(c: Charge) -> int:
            return money if c.money else used_in + used_out

        entries = [(c.key, actual(c) - amount) for c, amount in ticket.checked]
        entries += [(c.key, actual(c)) for c in ticket.counted]
        served = ticket.served
        trigger = trigger or (served.trigger if served else "message")
        day = datetime.fromtimestamp(self.clock.time(), UTC).date().isoformat()
        row = UsageRow(
            day,
            agent,
            (served.who if served else None) or "",
            (served.channel if served else None) or "",
            ref,
            trigger,
            1,
            int(estimated),
            used_in,
            used_out,
            money,
        )
        ops: list[Write[Any]] = [RecordUsage(row)]
        if entries:
            ops.insert(0, AddSpend(entries))
        await self.store.write(*ops)
        if self._on_spend is not None:
            self._on_spend(agent, ref, trigger, used_in, used_out, money, estimated)


async def metered(
    meter: Meter | None,
    agent: str,
    chains: tuple[Sequence[str], Sequence[str] | None],
    request: CompletionRequest,
    run: Callable[[Sequence[str]], Awaitable[tuple[Completion, str]]],
    trigger: str | None = None,
) -> tuple[Completion, str]:
    """`run(chain)` through the meter when the daemon has one (a bare engine, in tests: unmetered)."""
    if meter is None:
        return await run(chains[0])
    return await meter.call(agent, chains, request, run, trigger)
