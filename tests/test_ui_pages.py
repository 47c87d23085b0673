"""What the /ui/ pages show, over HTTP in-process: the system prompt, memory values, filters, links, refresh."""

from __future__ import annotations

import html
import re
from pathlib import Path

from agentd.http.ui.views import label
from tests.support import send, serving

ASSISTANT = "purpose: You are <Ana>'s assistant.\nmemory: {scope: thread, persistent: true}\nchannels: {webhook: {}}\n"
EPISODIC = "memory:\n  strategy: {kind: episodic}\nchannels: {webhook: {}}\n"
PAGE = "/ui/agents/assistant/conversations/webhook:c"


def element(page: str, element_id: str) -> str:
    """The markup inside the element with this id (the first closing tag of its kind ends it)."""
    match = re.search(rf'<(\w+)[^>]* id="{element_id}"[^>]*>(.*?)</\1>', page, re.S)
    assert match, f"no element #{element_id} in the page"
    return match.group(2)


async def test_the_conversation_page_shows_the_system_prompt_of_the_next_turn(tmp_path: Path) -> None:
    async with serving(tmp_path, {"assistant": ASSISTANT}) as (_daemon, client):
        await send(client, "assistant", "c", "remember color: blue")
        page = (await client.get(PAGE)).text
        system = (await client.get("/agents/assistant/conversations/webhook:c")).json()["system"]
    prompt = element(page, "system-prompt")
    assert system.startswith("You are <Ana>'s assistant.") and "- color" in system
    assert html.escape(system, quote=False) in prompt.replace("&#39;", "'")
    assert "<Ana>" not in page
    # without http.token the JSON routes are open: the link says nothing of a token
    assert '<a href="/agents/assistant/conversations/webhook:c">' in page and "Bearer" not in page


async def test_looking_at_the_next_turn_leaves_the_last_recall_alone(tmp_path: Path) -> None:
    """Episodic memory shows the recall of the last real turn; previewing the next one must not replace it."""
    (tmp_path / "agentd.yaml").write_text("embedder: hash/256\n")
    async with serving(tmp_path, {"a": EPISODIC}) as (_daemon, client):
        await send(client, "a", "c", "we fly to Lisbon")
        await send(client, "a", "c", "where do we fly?")
        for path in ("/ui/agents/a/conversations/webhook:c", "/agents/a/conversations/webhook:c"):
            assert (await client.get(path)).status_code == 200
            [layer] = (await client.get("/agents/a/conversations/webhook:c/memory")).json()["layers"]
            assert layer["last_recall"]["query"] == "where do we fly?", path


async def test_the_pages_of_an_agent_without_persistent_memory(tmp_path: Path) -> None:
    async with serving(tmp_path, {"plain": "memory: {scope: thread}\nchannels: {webhook: {}}\n"}) as (
        _daemon,
        client,
    ):
        await send(client, "plain", "c", "hello")
        for path in ("/ui/", "/ui/agents/plain", "/ui/agents/plain/conversations/webhook:c"):
            r = await client.get(path)
            assert r.status_code == 200, path
        assert (
            "You said: hello" in r.text
            and "no purpose" in r.text
            and "<h3>persistent memory</h3>" not in r.text
        )


# -- persistent memory: keys on the page, a value when its key is opened -------------------------------

PER_USER = "memory: {scope: thread, persistent: true, persistent_scope: user}\nchannels: {webhook: {}}\n"


def links(markup: str) -> dict[str, str]:
    """Link text -> href (unescaped)."""
    return {
        html.unescape(text): html.unescape(href)
        for href, text in re.findall(r'<a href="([^"]*)">([^<]*)</a>', markup)
    }


async def test_a_persistent_value_is_shown_when_its_key_is_opened(tmp_path: Path) -> None:
    async with serving(tmp_path, {"assistant": ASSISTANT, "plain": EPISODIC}) as (_daemon, client):
        await send(client, "assistant", "c", "remember color: blue")
        await send(client, "assistant", "c", "remember city: Lisbon")
        listed = element((await client.get(PAGE)).text, "persistent-memory")
        assert "blue" not in listed and "Lisbon" not in listed  # keys only, as the prompt has them
        assert links(listed) == {
            "city": f"{PAGE}/memories/city",
            "color": f"{PAGE}/memories/color",
        }
        r = await client.get(f"{PAGE}/memories/city")
        assert r.status_code == 200 and element(r.text, "memory-value") == "Lisbon"
        assert "shared by every conversation of this agent" in r.text

        missing = await client.get(f"{PAGE}/memories/shoe-size")
        assert missing.status_code == 404 and "No memory named shoe-size" in missing.text
        none = await client.get("/ui/agents/plain/conversations/webhook:c/memories/color")
        assert none.status_code == 404 and "has no persistent memory" in none.text


async def test_per_user_memory_is_listed_and_read_per_speaker(tmp_path: Path) -> None:
    async with serving(tmp_path, {"assistant": PER_USER}) as (_daemon, client):
        await send(client, "assistant", "c", "remember color: blue", user_id="ana")
        await send(
            client, "assistant", "c", "remember color: red", user_id="bo&co"
        )  # a user id has no spaces
        await send(client, "assistant", "c", "remember pet: cat", user_id="ana")
        listed = element((await client.get(PAGE)).text, "persistent-memory")
        assert "Per speaker" in listed and "<dt>ana</dt>" in listed and "<dt>bo&amp;co</dt>" in listed
        hrefs = re.findall(r'<a href="([^"]*)">', listed)
        assert [html.unescape(h) for h in hrefs] == [
            f"{PAGE}/memories/color?user=ana",
            f"{PAGE}/memories/pet?user=ana",
            f"{PAGE}/memories/color?user=bo%26co",
        ]
        values = {}
        for href in hrefs:
            r = await client.get(html.unescape(href))
            assert r.status_code == 200, href
            values[html.unescape(href)] = element(r.text, "memory-value")
        assert list(values.values()) == ["blue", "cat", "red"]
        # another person's key stays theirs: bo holds no pet, and neither does a speaker without a user id
        for href in (f"{PAGE}/memories/pet?user=bo%26co", f"{PAGE}/memories/color"):
            r = await client.get(href)
            assert r.status_code == 404 and "No memory named" in r.text and "cat" not in r.text


def test_reported_keys_get_labels_for_people_and_data_keys_stay_as_they_are() -> None:
    assert label("compact_at_tokens") == "compacts at (tokens)"
    assert label("some_new_setting") == "some new setting"  # a key without a label still reads as words
    assert label("messages") == "messages"
    # keys that are data (partitions, user ids) are shown as they are
    assert (
        label("user:ana_b") == "user:ana_b"
        and label("conversation:webhook:c_1") == "conversation:webhook:c_1"
    )


# -- reloading ---------------------------------------------------------------------------------------------


def header_links(page: str) -> dict[str, str]:
    header = re.search(r"<header>(.*?)</header>", page, re.S)
    assert header, page
    return links(header.group(1))


async def test_every_page_reloads_by_hand_or_every_few_seconds(tmp_path: Path) -> None:
    async with serving(tmp_path, {"assistant": ASSISTANT}) as (_daemon, client):
        await send(client, "assistant", "c", "remember color: blue")
        for path in (
            "/ui/",
            "/ui/agents/assistant",
            PAGE,
            f"{PAGE}/memories/color",
            "/ui/audit?kind=memory",
            "/ui/usage",
        ):
            page = (await client.get(path)).text
            every = path + ("&" if "?" in path else "?") + "refresh=10"
            assert header_links(page) == {
                "Agents": "/ui/",
                "Audit": "/ui/audit",
                "Usage": "/ui/usage",
                "Refresh": path,
                "auto-refresh every 10 s": every,
            }
            assert "http-equiv" not in page

        auto = (await client.get("/ui/audit?kind=memory&refresh=5")).text
        assert '<meta http-equiv="refresh" content="5">' in auto and "reloading every 5 s" in auto
        assert header_links(auto) == {
            "Agents": "/ui/",
            "Audit": "/ui/audit",
            "Usage": "/ui/usage",
            "Refresh": "/ui/audit?kind=memory&refresh=5",
            "stop": "/ui/audit?kind=memory",
        }
        assert '<input type="hidden" name="refresh" value="5">' in auto  # filtering keeps reloading

        for bad in ("0", "abc", "99999", "-1", "1.5", "²", "٣"):
            r = await client.get(f"/ui/?refresh={bad}")
            assert r.status_code == 400 and "refresh: expected whole seconds" in r.text, bad
            assert "http-equiv" not in r.text
