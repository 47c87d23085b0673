"""The daemon that owns the data folder, when one runs: the CLI then goes through its HTTP API
(two processes never write one SQLite file)."""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
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
    if getattr(args, "agent", None) is not None and holder.agents_dir is not None:
        # the daemon owning the data folder may serve another agents folder than this command names (the
        # README's example beside the "Run it" daemon): its answer would be a 404 or another agent's
        wanted = Path(args.agents).resolve()
        if Path(holder.agents_dir) != wanted:
            raise AgentdError(
                f"the daemon on data folder {args.data} (pid {holder.pid}, {holder.http_address}) serves the "
                f"agents folder {holder.agents_dir}, not {wanted}: give --agents {holder.agents_dir} to talk "
                "to it, or --data another folder (the one of a daemon serving these agents, or a new one)"
            )
    token = settings_of(args).http.token
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(base_url=holder.http_address, headers=headers, timeout=None, trust_env=False) as client:
        yield client


def address(url: httpx.URL) -> str:
    """`http://127.0.0.1:8765`: which daemon, port included (several may run on one host)."""
    return f"{url.scheme}://{url.host}:{url.port}" if url.port is not None else f"{url.scheme}://{url.host}"


def answer(response: httpx.Response) -> dict[str, object]:
    """The JSON body of a 200, or an AgentdError with what the daemon said."""
    if response.status_code != 200:
        raise AgentdError(
            f"the daemon at {address(response.request.url)} answered {response.status_code}: "
            f"{_reason(response)}"
        )
    body: dict[str, object] = response.json()
    return body


def _reason(response: httpx.Response) -> str:
    """The `{"error": reason}` of agentd's error bodies, else the body as it came."""
    with contextlib.suppress(ValueError):
        body = response.json()
        if isinstance(body, dict) and isinstance(body.get("error"), str):
            return body["error"]
    return response.text


@contextlib.contextmanager
def reaching(client: httpx.Client, sent: str | None = None) -> Iterator[None]:
    """Turn a daemon that went away into an AgentdError that says so and what became of `sent` (what
    the request carried): not sent when the connection could not be made; maybe stored when it broke
    after the request went out (the turn does not belong to the request and may still complete)."""
    where = address(client.base_url)
    try:
        yield
    except httpx.ConnectError:
        raise AgentdError(
            f"the daemon at {where} cannot be reached (has it stopped?): {sent} was not sent"
        ) from None
    except httpx.TransportError as e:
        raise AgentdError(
            f"the connection to the daemon at {where} broke ({type(e).__name__}): {sent} may have been "
            "received and answered all the same"
        ) from None


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
            elif event.event == "progress" and (shown := getattr(sink, "progress", None)) is not None:
                shown(data["text"])
            elif event.event == "reply":
                reply: dict[str, Any] = data
                return reply
            elif event.event == "error":
                raise AgentdError(f"the daemon could not answer: {data['error']}")
    raise AgentdError("the daemon closed the connection before the reply was complete")
