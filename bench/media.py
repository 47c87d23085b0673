"""Images, files and voice (issue 21): what a photo costs a turn, the store and the hot cache.

    python bench/media.py [--turns 20] [--items 10000] [--json PATH]
    python bench/media.py --quick    # smoke run: 4 turns of each, 300 stored items

1. Turn latency with a 1 MB photo against a text-only turn, in the same run, alternating: a real
   agent on a real SQLite file, its model the fake OpenAI server over loopback HTTP (so the photo is
   stored, read back for the replay of the last turns, fitted to OpenAI's limits with Pillow, sent
   as base64 and parsed by the server, which checks it is an image).
2. Store size and read time with N media items (10,000 by default, 20 KB each): the file's size, and
   the time MediaBlobs takes for one item, and for the two a turn's replay reads.
3. The memory a conversation of 50 image turns holds in the hot cache: tracemalloc's count of the hot
   thread's objects against a text-only one of 50 turns, and the hot budget's estimate of each. The
   transcript holds references (a hash, a type, a size), never bytes.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import os
import random
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from _common import (  # bench/_common.py: first, it puts the repository root on the path
    log,
    median,
    pct,
    write_results,
)

from agentd.config.loader import parse_agent
from agentd.config.models import DaemonSpec
from agentd.daemon import Resources
from agentd.engine.hot_cache import thread_bytes
from agentd.events import Attachment, InboundEvent
from agentd.store.queries import ActiveThread, MediaBlobs
from agentd.store.records import MediaItem
from agentd.store.writes import StoreMedia
from testkit.fake_llm import FakeLLM
from testkit.fake_media import images_in
from testkit.media_files import jpeg_of_bytes, png

AGENT = "model: gpt/gpt-4o\nmemory: {scope: thread, compact_at_tokens: false}\nmedia: {max_bytes: 5000000}\n"


def settings(fake: FakeLLM) -> DaemonSpec:
    gpt = {"kind": "openai", "base_url": fake.openai_base_url, "api_key": "k", "max_retries": 0}
    return DaemonSpec.model_validate({"providers": {"gpt": gpt}})


async def turn_latency(turns: int, root: Path) -> dict[str, Any]:
    """Alternating turns of a text-only conversation and of one where each turn sends a new 1 MB photo
    (and replays the turn before's, media.images_in_context 2); milliseconds each."""
    log(f"turn latency: making {turns} photos of ~1 MB")
    photos = [jpeg_of_bytes(1_000_000) for _ in range(turns)]
    text_ms: list[float] = []
    photo_ms: list[float] = []
    with FakeLLM() as fake:
        async with Resources(settings(fake), root) as resources:
            agent = await resources.open_agent(parse_agent(Path("eyes.yaml"), text=AGENT, env={}))
            try:
                for i in range(turns):
                    for with_photo in (False, True):
                        files = (Attachment("image", "image/jpeg", f"p{i}.jpg", len(photos[i]), photos[i]),)
                        # two conversations: the text-only one never replays a photo
                        key, attached = ("bench:photos", files) if with_photo else ("bench:text", ())
                        event = InboundEvent(
                            agent.name, key, f"turn {i}", "bench", user_id="u", attachments=attached
                        )
                        started = time.perf_counter()
                        reply = await agent.handle(event)
                        took = (time.perf_counter() - started) * 1000
                        assert reply.error is None, reply.text
                        (photo_ms if with_photo else text_ms).append(took)
            finally:
                await agent.drain(5)
                await agent.close()
        sent = [r.json for r in fake.requests if r.path == "/v1/chat/completions"]
    # each photo turn sent its photo and the one before (the fake checked each is an image), no text one did
    assert len(sent) == 2 * turns
    shown = [len(images_in(body)) for body in sent]
    assert shown[0::2] == [0] * turns and shown[1::2] == [1] + [2] * (turns - 1), shown
    return {
        "photo_bytes": round(sum(map(len, photos)) / len(photos)),
        "text_ms": {"p50": median(text_ms), "p95": pct(text_ms, 95)},
        "photo_ms": {"p50": median(photo_ms), "p95": pct(photo_ms, 95)},
        "photo_over_text_p50": median(photo_ms) / median(text_ms),
    }


async def store_size(items: int, root: Path, item_bytes: int = 20_000, reads: int = 300) -> dict[str, Any]:
    """N items in an agent's file; the file's size and MediaBlobs' read time."""
    async with Resources(DaemonSpec(), root) as resources:
        agent = await resources.open_agent(
            parse_agent(Path("store.yaml"), text="memory: {scope: thread}\n", env={})
        )
        store = agent.state.store
        try:
            shas: list[tuple[str, str]] = []
            started = time.perf_counter()
            batch: list[MediaItem] = []
            for i in range(items):
                data = os.urandom(item_bytes)
                sha = hashlib.sha256(data).hexdigest()
                key = f"bench:c{i % 200}"
                shas.append((key, sha))
                batch.append(
                    MediaItem(
                        key, f"u{i % 50}", sha, "image", "image/jpeg", None, item_bytes, data, time.time()
                    )
                )
                if len(batch) == 100:
                    await store.write(StoreMedia(batch))
                    batch = []
            if batch:
                await store.write(StoreMedia(batch))
            write_s = time.perf_counter() - started
            rng = random.Random(7)
            one_ms, two_ms = [], []
            for _ in range(reads):
                key, sha = rng.choice(shas)
                t = time.perf_counter()
                got = await store.read(MediaBlobs(key, [sha]))
                one_ms.append((time.perf_counter() - t) * 1000)
                assert len(got[sha]) == item_bytes
                (k1, s1), (_, s2) = rng.sample(shas, 2)
                t = time.perf_counter()
                await store.read(MediaBlobs(k1, [s1, s2]))
                two_ms.append((time.perf_counter() - t) * 1000)
        finally:
            await agent.close()
    size = files_size(root, "store.sqlite*")
    return {
        "items": items,
        "item_bytes": item_bytes,
        "file_mb": size / 2**20,
        "overhead_per_item_bytes": (size - items * item_bytes) / items,
        "write_s": write_s,
        "read_one_ms": {"p50": median(one_ms), "p95": pct(one_ms, 95)},
        "read_two_ms": {"p50": median(two_ms), "p95": pct(two_ms, 95)},
    }


def files_size(root: Path, pattern: str) -> int:
    return sum(p.stat().st_size for p in root.glob(pattern))


async def hot_memory(turns: int, root: Path) -> dict[str, Any]:
    """The hot thread of `turns` photo turns against one of `turns` text turns, loaded afresh."""
    out: dict[str, Any] = {}
    text = "model: gpt/gpt-4o\nmemory: {scope: thread, compact_at_tokens: false}\n"
    with FakeLLM() as fake:
        async with Resources(settings(fake), root) as resources:
            agent = await resources.open_agent(parse_agent(Path("hot.yaml"), text=text, env={}))
            try:
                for label, with_photo in (("text", False), ("photos", True)):
                    key = f"bench:{label}"
                    for i in range(turns):
                        image = png((i * 5 % 256, 80, 160), (320, 240))
                        files = (Attachment("image", "image/png", f"p{i}.png", len(image), image),)
                        await agent.handle(
                            InboundEvent(
                                agent.name,
                                key,
                                f"turn {i}",
                                "bench",
                                user_id="u",
                                attachments=files if with_photo else (),
                            )
                        )
                    gc.collect()
                    tracemalloc.start()
                    before = tracemalloc.take_snapshot()
                    thread = await agent.state.store.read(ActiveThread(key))  # as the hot cache holds it
                    after = tracemalloc.take_snapshot()
                    tracemalloc.stop()
                    held = sum(s.size_diff for s in after.compare_to(before, "filename"))
                    out[label] = {
                        "messages": len(thread.messages),
                        "traced_bytes": held,
                        "budget_estimate_bytes": thread_bytes(thread),
                    }
                    del thread
            finally:
                await agent.drain(5)
                await agent.close()
    out["photos_over_text"] = out["photos"]["traced_bytes"] / out["text"]["traced_bytes"]
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--hot-turns", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="smoke run: 4 turns, 300 items, 10 hot turns")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.quick:
        args.turns, args.items, args.hot_turns = 4, 300, 10
    with tempfile.TemporaryDirectory(prefix="agentd-bench-media-") as tmp:
        root = Path(tmp)
        latency = await turn_latency(args.turns, root / "latency")
        log("store: writing", args.items, "items")
        store = await store_size(args.items, root / "store")
        log("hot cache:", args.hot_turns, "turns")
        hot = await hot_memory(args.hot_turns, root / "hot")
    results = {
        "args": vars(args) | {"json": str(args.json) if args.json else None},
        "latency": latency,
        "store": store,
        "hot": hot,
    }
    print(f"turn latency, {args.turns} turns each, same run (photo ~{latency['photo_bytes'] / 1e6:.2f} MB):")
    print(f"  text-only  p50 {latency['text_ms']['p50']:.1f} ms  p95 {latency['text_ms']['p95']:.1f} ms")
    print(
        f"  1 MB photo p50 {latency['photo_ms']['p50']:.1f} ms  p95 {latency['photo_ms']['p95']:.1f} ms"
        f"  ({latency['photo_over_text_p50']:.1f}x text at p50)"
    )
    print(
        f"store with {store['items']} items of {store['item_bytes']} bytes: file {store['file_mb']:.1f} MB"
        f" ({store['overhead_per_item_bytes']:.0f} bytes overhead an item), written in {store['write_s']:.1f} s;"
        f" read one p50 {store['read_one_ms']['p50']:.2f} ms p95 {store['read_one_ms']['p95']:.2f} ms,"
        f" two p50 {store['read_two_ms']['p50']:.2f} ms"
    )
    print(
        f"hot thread of {hot['photos']['messages']} messages: photos {hot['photos']['traced_bytes'] / 1024:.0f} KiB"
        f" vs text {hot['text']['traced_bytes'] / 1024:.0f} KiB traced ({hot['photos_over_text']:.2f}x);"
        f" budget estimates {hot['photos']['budget_estimate_bytes'] / 1024:.0f} / {hot['text']['budget_estimate_bytes'] / 1024:.0f} KiB"
    )
    path = write_results("media", results)
    if args.json:
        args.json.write_text(path.read_text())
    log("results:", path)


if __name__ == "__main__":
    asyncio.run(main())
