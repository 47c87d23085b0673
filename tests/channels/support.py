"""Checks the platform-callback tests of every channel share."""

from __future__ import annotations

import logging

import httpx
import pytest


def assert_refused(response: httpx.Response, status: int, reason: str) -> None:
    """Refused as a callback must be: this 4xx, and a JSON body whose `error` says why."""
    assert response.status_code == status, response.text
    assert reason in response.json()["error"]


def errors_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What was logged at ERROR or above: a refused request must leave none (and no traceback)."""
    return [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR]
