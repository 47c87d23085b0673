"""The daemon that owns the data folder, when one runs: the CLI then goes through its HTTP API
(two processes never write one SQLite file)."""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Iterator
from typing import Any

import httpx

from agentd.cli.settings import settings_of
from agentd.errors import AgentdError
from agentd.events import ReplySink
from agentd.providers.sse import SSEDecoder
from agentd.store.folder_lock import probe


@contextlib.contextmanager
def running_daemon(args: argparse.Namespace) -> Iterator[httpx.Client | None]:
    """A client of the daemon holding args.data (with agentd.yaml's token), or None when none runs."""
    holder = probe(args.data)
    if holder is None:
        yield None
        return
    if not holder.http_address:
        raise AgentdError(f"a daemon (pid {holder.pid}) is starting on {args.data}: try again in a moment")
    token = settings_of(args).http.token
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(base_url=holder.http_address, headers=headers, timeout=None, trust_env=False) as client:
        yield client


def answer(response: httpx.Response) -> dict[str, object]:
    """The JSON body of a 200, or an AgentdError with what the daemon said."""
    if response.status_code != 200:
        raise AgentdError(
            f"the daemon at {response.request.url.host} answered {response.status_code}: {response.text}"
        )
    body: dict[str, object] = response.json()
    return body


def streamed_answer(client: httpx.Client, path: str, body: dict[str, Any], sink: ReplySink) -> dict[str, Any]:
    """POST `body` to a streaming route (`?stream=true`), tell `sink` the reply as it is written, and
    return the final `reply` event's JSON; an AgentdError with what the daemon said otherwise."""
    with client.stream("POST", path, params={"stream": "true"}, json=body) as response:
        if response.status_code != 200:
            response.read()
            answer(response)
        decoder = SSEDecoder()
        for line in response.iter_lines():
            event = decoder.feed(line)
            if event is None:
                continue
            data = json.loads(event.data)
            if event.event == "delta":
                sink.delta(data["text"])
            elif event.event == "restart":
                sink.restart()
            elif event.event == "reply":
                reply: dict[str, Any] = data
                return reply
            elif event.event == "error":
                raise AgentdError(f"the daemon could not answer: {data['error']}")
    raise AgentdError("the daemon closed the connection before the reply was complete")
