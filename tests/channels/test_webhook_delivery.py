"""The webhook's signed deliveries against a real HTTP receiver on 127.0.0.1, which verifies each with
the Standard Webhooks reference library (not our code): signed, timestamped against replay, one id
across retries, and every answer but a 2xx a failure the outbox retries."""

from __future__ import annotations

import asyncio
import base64
import re
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from agentd.channels.webhook_delivery import DeliveryFailed, job_message, send_signed
from testkit.serving import serve_on_loopback

SECRET = "s3cret-for-the-hook-0123456789"


@dataclass
class Receiver:
    """A receiver that keeps every request as it came and answers from a script (default 204)."""

    secret_for_library: str
    answers: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    got: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    verified: list[object] = field(default_factory=list)
    delay_s: float = 0.0

    async def hook(self, request: Request) -> Response:
        body = await request.body()
        headers = dict(request.headers)
        self.got.append((headers, body))
        try:
            self.verified.append(Webhook(self.secret_for_library).verify(body, headers))
        except WebhookVerificationError as e:
            self.verified.append(e)
        await asyncio.sleep(self.delay_s)
        status, extra = self.answers.pop(0) if self.answers else (204, {})
        return Response(
            status_code=status, headers=extra | ({"location": "/elsewhere"} if status == 302 else {})
        )


def library_secret(secret: str) -> str:
    """The secret as the reference library takes it: our key bytes, base64 (a whsec_ one as it is)."""
    return secret if secret.startswith("whsec_") else base64.b64encode(secret.encode()).decode()


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[Receiver, str]]:
    hook = Receiver(library_secret(SECRET))
    app = Starlette(routes=[Route("/hook", hook.hook, methods=["POST"])])
    async with serve_on_loopback(app) as base:
        yield hook, f"{base}/hook"


PAYLOAD = job_message(
    agent="bot",
    job_id="j-1",
    conversation="webhook:t-1",
    text="Reminder: drink water",
    fired_at=0,
    kind="reminder",
)


async def test_a_delivery_is_signed_so_the_reference_library_accepts_it(
    receiver: tuple[Receiver, str],
) -> None:
    hook, url = receiver
    async with httpx.AsyncClient() as client:
        ack = await send_signed(client, url, SECRET, delivery_id="d-42", payload=PAYLOAD, now=time.time())
    assert (ack.status, ack.delivery_id) == (204, "d-42")
    [(headers, _body)] = hook.got
    assert hook.verified == [PAYLOAD]  # verified, and the body is the payload
    assert headers["webhook-id"] == "d-42"
    assert headers["content-type"] == "application/json"
    assert abs(int(headers["webhook-timestamp"]) - time.time()) < 5
    assert headers["webhook-signature"].startswith("v1,")
    assert PAYLOAD["data"]["text"] == "Reminder: drink water"
    assert PAYLOAD["timestamp"] == "1970-01-01T00:00:00Z"


async def test_a_whsec_secret_is_the_standard_base64_key() -> None:
    secret = "whsec_" + base64.b64encode(b"\x00\x01binary key bytes\xff").decode()
    hook = Receiver(secret)
    app = Starlette(routes=[Route("/hook", hook.hook, methods=["POST"])])
    async with serve_on_loopback(app) as base, httpx.AsyncClient() as client:
        await send_signed(client, f"{base}/hook", secret, delivery_id="d-1", payload=PAYLOAD, now=time.time())
    assert hook.verified == [PAYLOAD]


async def test_an_old_signature_or_a_changed_body_is_refused_by_the_receiver(
    receiver: tuple[Receiver, str],
) -> None:
    hook, url = receiver
    async with httpx.AsyncClient() as client:
        # signed ten minutes ago: a replay, past the receiver's 5 minutes
        await send_signed(client, url, SECRET, delivery_id="d-1", payload=PAYLOAD, now=time.time() - 600)
        # signed under another secret
        await send_signed(client, url, SECRET + "x", delivery_id="d-2", payload=PAYLOAD, now=time.time())
    assert [type(v) for v in hook.verified] == [WebhookVerificationError, WebhookVerificationError]
    headers, body = hook.got[0]
    fresh = dict(headers, **{"webhook-timestamp": str(int(time.time()))})
    with pytest.raises(WebhookVerificationError):  # the timestamp is signed: it cannot be refreshed
        Webhook(library_secret(SECRET)).verify(body, fresh)


async def test_a_failure_is_raised_and_the_retry_carries_the_same_id(receiver: tuple[Receiver, str]) -> None:
    hook, url = receiver
    hook.answers = [(503, {"retry-after": "7"}), (429, {}), (200, {})]
    attempts: list[DeliveryFailed | int] = []
    async with httpx.AsyncClient() as client:
        for _ in range(3):
            try:
                ack = await send_signed(
                    client, url, SECRET, delivery_id="d-7", payload=PAYLOAD, now=time.time()
                )
                attempts.append(ack.status)
            except DeliveryFailed as e:
                attempts.append(e)
    first, second, third = attempts
    assert isinstance(first, DeliveryFailed) and (first.status, first.retryable, first.retry_after) == (
        503,
        True,
        7,
    )
    assert str(first) == f"{url} answered HTTP 503"
    assert isinstance(second, DeliveryFailed) and (second.status, second.retryable) == (429, True)
    assert third == 200
    assert [h["webhook-id"] for h, _ in hook.got] == ["d-7", "d-7", "d-7"]  # the receiver can drop a repeat
    assert hook.verified == [PAYLOAD, PAYLOAD, PAYLOAD]


@pytest.mark.parametrize(
    ("status", "retryable"), [(400, False), (404, False), (410, False), (302, False), (500, True)]
)
async def test_every_answer_but_2xx_fails(
    receiver: tuple[Receiver, str], status: int, retryable: bool
) -> None:
    hook, url = receiver
    hook.answers = [(status, {})]
    async with httpx.AsyncClient() as client:
        with pytest.raises(DeliveryFailed) as caught:
            await send_signed(client, url, SECRET, delivery_id="d-1", payload=PAYLOAD, now=time.time())
    assert (caught.value.status, caught.value.retryable) == (status, retryable)
    assert len(hook.got) == 1  # a redirect is not followed


async def test_no_answer_is_a_failure_to_retry(receiver: tuple[Receiver, str]) -> None:
    hook, url = receiver
    hook.delay_s = 1.0
    async with httpx.AsyncClient() as client:
        with pytest.raises(DeliveryFailed) as slow:
            await send_signed(
                client, url, SECRET, delivery_id="d-1", payload=PAYLOAD, now=time.time(), timeout_s=0.2
            )
        with socket.socket() as unused:  # a port nothing listens on
            unused.bind(("127.0.0.1", 0))
            closed = f"http://127.0.0.1:{unused.getsockname()[1]}/hook"
        with pytest.raises(DeliveryFailed) as refused:
            await send_signed(client, closed, SECRET, delivery_id="d-2", payload=PAYLOAD, now=time.time())
    assert (slow.value.status, slow.value.retryable, str(slow.value)) == (
        None,
        True,
        f"{url} did not answer within 0.2s",
    )
    assert (refused.value.status, refused.value.retryable) == (None, True)
    assert str(refused.value).startswith(f"{closed} could not be reached")


def readme_verifier() -> Any:
    """The README's standard-library check of a delivery, as a receiver would paste it."""
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    [code] = re.findall(r"^```python\n(# verify an agentd job delivery.*?)^```", readme, re.M | re.S)
    scope: dict[str, Any] = {}
    exec(compile(code, "README.md", "exec"), scope)
    return scope["verify"]


async def test_the_readmes_check_verifies_a_real_delivery(receiver: tuple[Receiver, str]) -> None:
    hook, url = receiver
    async with httpx.AsyncClient() as client:
        await send_signed(client, url, SECRET, delivery_id="d-1", payload=PAYLOAD, now=time.time())
        await send_signed(client, url, SECRET, delivery_id="d-2", payload=PAYLOAD, now=time.time() - 600)
    verify = readme_verifier()
    (fresh, body), (stale, stale_body) = hook.got
    assert verify(SECRET, fresh, body) == PAYLOAD
    with pytest.raises(ValueError, match="bad signature"):
        verify(SECRET + "x", fresh, body)
    with pytest.raises(ValueError, match="bad signature"):
        verify(SECRET, fresh, body.replace(b"drink water", b"drink wine!"))
    with pytest.raises(ValueError, match="stale"):
        verify(SECRET, stale, stale_body)
