import anyio

from agentd.clock import SYSTEM_CLOCK
from testkit.clock import ManualClock
from testkit.waiting import wait_until


async def test_a_manual_clock_wakes_only_the_sleepers_that_are_due() -> None:
    clock = ManualClock(start=1000.0)
    woke: list[float] = []

    async def sleeper(when: float) -> None:
        await clock.sleep_until(when)
        woke.append(when)

    async with anyio.create_task_group() as tg:
        tg.start_soon(sleeper, 1010.0)
        tg.start_soon(sleeper, 1100.0)
        await wait_until(lambda: clock.sleepers == 2, "both sleepers waiting")
        clock.advance(20)
        await wait_until(lambda: woke, "the due sleeper woken")
        assert woke == [1010.0] and clock.sleepers == 1
        clock.set(1100.0)
    assert woke == [1010.0, 1100.0] and clock.time() == 1100.0


async def test_a_wait_on_a_manual_clock_is_cancellable_and_leaves_no_sleeper() -> None:
    clock = ManualClock()
    with anyio.move_on_after(0.05):
        await clock.sleep_until(clock.time() + 3600)
    assert clock.sleepers == 0


async def test_the_system_clock_returns_at_once_for_a_time_already_past() -> None:
    with anyio.fail_after(1):
        await SYSTEM_CLOCK.sleep_until(SYSTEM_CLOCK.time() - 5)
