"""Loading long threads without the cyclic garbage collector walking the heap.

Loading a thread of thousands of messages allocates tens of thousands of
objects. Left alone, the collector counts them as new long-lived objects and
sets off full collections that walk everything already in memory (every hot
thread, every loaded agent): the cold load of a 10,000-message thread took
~160 ms instead of ~40 (bench/turns.py). Loads leave no cyclic garbage, so
the collector is paused while any load runs, and what a long load brought in
is then frozen out of its reach. The daemon's start, which builds every agent,
is paused and frozen the same way. Frozen objects are still freed by
refcounting when a thread is evicted.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

LONG_LOAD = 500  # messages: below this a load is left to the collector as usual


class _Loads:
    running = 0  # loads in progress (they overlap: each conversation loads on its own)
    long = False  # whether one of them brought in LONG_LOAD messages or more
    paused = False  # whether the collector was on when the first of them began (we turn it back on)


@contextmanager
def collector_paused(freeze_after: bool = False) -> Iterator[None]:
    """Pause the collector around a load; call `loaded(n)` with the messages it brought in.
    `freeze_after`: what this load brings in is long-lived whatever its size (the agents built at
    start), so it is frozen out of the collector's reach when the loads end."""
    if _Loads.running == 0:
        _Loads.paused = gc.isenabled()
        _Loads.long = False
        gc.disable()
    _Loads.running += 1
    if freeze_after:
        _Loads.long = True
    try:
        yield
    finally:
        _Loads.running -= 1
        if _Loads.running == 0 and _Loads.paused:
            if _Loads.long:
                # Frozen without a collection first, as the daemon's periodic freeze does: walking
                # what was just loaded would cost ~10 ms of a ~40 ms load, to find at most the few
                # cycles other tasks left in these milliseconds (kept, frozen, until exit).
                gc.freeze()
            gc.enable()


def loaded(messages: int) -> None:
    """Record that a load brought in `messages` messages."""
    if messages >= LONG_LOAD:
        _Loads.long = True
