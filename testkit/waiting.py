"""Waiting for a condition in tests: the one polling helper every test uses."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


async def wait_until(check: Callable[[], T], what: str = "condition", timeout: float = 10.0) -> T:
    """Poll `check` without blocking the loop until it returns something truthy, and return that.

    The fakes answer the code under test from this same loop, so the wait must
    yield to it between polls. AssertionError names `what` on timeout.
    """
    deadline = time.monotonic() + timeout
    while not (result := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(0.01)
    return result
