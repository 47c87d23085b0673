"""`/attach PATH` in `agentd chat` (issue 21): the file goes with the next line, to the agent in this
process or to the daemon that owns the folder, and reaches the model as an image."""

from __future__ import annotations

import asyncio
from pathlib import Path

from testkit.fake_llm import FakeLLM
from testkit.fake_media import images_in
from testkit.media_files import png
from tests.daemon_process import DaemonProcess
from tests.support import agentd_cli

EYES = "purpose: You look.\nmodel: fake/gpt-4o\nmemory: {scope: thread}\n"


def folder(root: Path, fake: FakeLLM) -> Path:
    (root / "agents").mkdir()
    (root / "agents" / "eyes.yaml").write_text(EYES)
    (root / "agentd.yaml").write_text(
        f"providers: {{fake: {{kind: openai, base_url: '{fake.openai_base_url}', api_key: k, max_retries: 0}}}}\n"
    )
    (root / "photo.png").write_bytes(png((10, 200, 10), (40, 30)))
    return root


def chats_with_images(fake: FakeLLM) -> list[int]:
    return [len(images_in(r.json)) for r in fake.requests if r.path == "/v1/chat/completions"]


def test_attach_sends_the_file_with_the_next_line(tmp_path: Path) -> None:
    with FakeLLM() as fake:
        root = folder(tmp_path, fake)
        done = agentd_cli(
            root, "chat", "eyes", stdin="/attach photo.png\n/attach nothing.png\nwhat is it?\nand now?\n"
        )
        assert done.returncode == 0, done.stderr
        assert (
            "attached photo.png (image/png, " in done.stdout
            and "it goes with your next message" in done.stdout
        )
        assert "cannot attach: [Errno 2] No such file or directory" in done.stderr
        # the photo went with the first line only; the second line's request replays it (images_in_context 2)
        assert chats_with_images(fake) == [1, 1]
        said = fake.requests[0].json["messages"][-1]["content"]
        assert said[0] == {"type": "text", "text": "what is it?"}


async def test_attach_through_a_running_daemon(tmp_path: Path) -> None:
    with FakeLLM() as fake:
        root = folder(tmp_path, fake)
        daemon = await DaemonProcess(root).start()
        try:
            done = await asyncio.to_thread(
                agentd_cli, root, "chat", "eyes", stdin="/attach photo.png\nwhat is it?\n"
            )
            assert done.returncode == 0, done.stderr
            assert "the daemon at" in done.stdout and chats_with_images(fake) == [1]
        finally:
            assert daemon.stop() == 0
