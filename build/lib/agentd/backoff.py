"""Waits between retries: exponential backoff with jitter, shared by providers and chat channels."""

from __future__ import annotations

import random
from collections.abc import Iterator


def backoff_delays(base: float = 1.0, cap: float = 60.0) -> Iterator[float]:
    """base, 2*base, 4*base ... capped at `cap`, each jittered down to as little as half.

    The jitter spreads out the retries of many callers that failed at the same
    moment (every turn hitting one provider, every channel losing one network).
    """
    delay = base
    while True:
        yield delay * (0.5 + random.random() / 2)
        delay = min(cap, delay * 2)
