"""What /ui/ shows a new user (issue 17, item 23): warnings (a missing key, memory that will do less),
why a rejected agent is rejected, approvals a run is paused on, and an audit trail in pages, newest last
as GET /audit lists it."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.daemon_process import DaemonProcess
from tests.support import send, serving
from tests.test_ui import CHROMEDRIVER, CHROMIUM, browser, click_through
from tests.test_ui import text_of as shown_text

__all__ = ["browser"]  # the fixture, shared with tests/test_ui.py

ASK = "memory: {scope: thread, persistent: true, writes: ask}\nchannels: {webhook: {}}\n"
PLAIN = "memory: {scope: thread, persistent: true}\nchannels: {webhook: {}}\n"


def text_of(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


async def test_the_agents_page_shows_warnings_and_why_an_agent_is_rejected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    agents = {
        "remote": "model: openai/gpt-4.1-mini\nchannels: {webhook: {}}\n",
        "broken": "purpose: x\nmodle: offline\n",
    }
    async with serving(tmp_path, agents) as (_, client):
        page = text_of((await client.get("/ui/")).text)
        agent_page = await client.get("/ui/agents/remote")
        rejected = await client.get("/ui/agents/broken")
    assert "provider openai (model gpt-4.1-mini): no API key: set OPENAI_API_KEY" in page
    assert "broken.yaml:2:1: unknown key 'modle'" in page
    assert "no API key: set OPENAI_API_KEY" in text_of(agent_page.text)
    assert rejected.status_code == 503
    assert "broken.yaml:2:1: unknown key 'modle'" in text_of(rejected.text)


async def test_a_run_paused_on_an_approval_shows_on_its_conversation_and_its_agent(tmp_path: Path) -> None:
    async with serving(tmp_path, {"keeper": ASK}) as (_, client):
        r = await client.post(
            "/agents/keeper/messages",
            json={"conversation_id": "c", "text": "remember city: Lisbon", "user_id": "ana"},
        )
        approval = r.json()["approval"]
        assert approval
        conversation = text_of((await client.get("/ui/agents/keeper/conversations/webhook:c")).text)
        agent = text_of((await client.get("/ui/agents/keeper")).text)
        await client.post(
            "/agents/keeper/messages",
            json={"conversation_id": "c", "text": f"/approve {approval}", "user_id": "ana"},
        )
        after = text_of((await client.get("/ui/agents/keeper/conversations/webhook:c")).text)
    assert "Paused: waiting for approval" in conversation and approval in conversation
    assert "remember" in conversation and "ana" in conversation
    assert "no runs yet" not in conversation
    assert "no finished runs yet: one is paused, waiting for approval (above)" in conversation
    assert "Waiting for approval" in agent and approval in agent and "webhook:c" in agent
    assert "Paused: waiting for approval" not in after


async def test_the_audit_page_is_in_pages_newest_last(tmp_path: Path) -> None:
    async with serving(tmp_path, {"a": PLAIN}) as (_, client):
        for i in range(130):
            await send(client, "a", "c", f"remember k{i:03d}: v")
        api = (await client.get("/audit", params={"agent": "a", "kind": "memory", "limit": 100})).json()[
            "events"
        ]
        first = (await client.get("/ui/audit", params={"agent": "a", "kind": "memory"})).text
        second = (await client.get("/ui/audit", params={"agent": "a", "kind": "memory", "page": "2"})).text
        bad = await client.get("/ui/audit", params={"page": "0"})

    def keys(page: str) -> list[str]:
        """The memory keys of the events shown, in the page's order (the data column is escaped JSON)."""
        return re.findall(r"&#34;key&#34;: &#34;(k\d{3})&#34;", page)

    assert keys(first) == [f"k{i:03d}" for i in range(30, 130)]  # the newest 100, newest last
    assert keys(first) == [e["data"]["key"] for e in api]  # as GET /audit lists them
    assert keys(second) == [f"k{i:03d}" for i in range(30)]
    assert 'id="older"' in first and "page=2" in first and 'id="newer"' not in first
    assert 'id="newer"' in second and 'id="older"' not in second
    assert bad.status_code == 400


# -- in the browser, against `agentd run` -------------------------------------------------------------


@pytest.mark.skipif(
    not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
    reason="needs Debian's chromium and chromium-driver (/usr/bin/chromium, /usr/bin/chromedriver); "
    ".ci/run installs them",
)
async def test_in_the_browser_a_paused_run_and_the_audit_pages(
    tmp_path: Path, browser: webdriver.Chrome
) -> None:
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "keeper.yaml").write_text(ASK)
    (tmp_path / "agents" / "notes.yaml").write_text(PLAIN)
    daemon = await DaemonProcess(tmp_path).start()
    try:
        asked = daemon.say("remember city: Lisbon", conversation="t1", agent="keeper", user_id="ana")
        for i in range(105):
            daemon.say(f"remember k{i:03d}: v", agent="notes")
        browser.get(f"{daemon.url}/ui/")
        click_through(browser, "keeper", "Agent keeper")
        waiting = shown_text(browser, "#approvals + p + table")
        assert asked["approval"] in waiting and "webhook:t1" in waiting
        click_through(browser, "webhook:t1", "Conversation webhook:t1")
        assert "Paused: waiting for approval" in shown_text(browser, "#approvals")
        assert "no finished runs yet: one is paused" in shown_text(browser)

        browser.get(f"{daemon.url}/ui/audit?agent=notes&kind=memory")
        rows = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "tbody tr")]
        assert len(rows) == 100 and '"key": "k005"' in rows[0] and '"key": "k104"' in rows[-1]  # newest last
        browser.find_element(By.ID, "older").click()
        WebDriverWait(browser, 10).until(lambda d: "page=2" in d.current_url)
        rows = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "tbody tr")]
        assert len(rows) == 5 and '"key": "k000"' in rows[0]
        browser.find_element(By.ID, "newer").click()
        WebDriverWait(browser, 10).until(lambda d: "page=" not in d.current_url)
    finally:
        assert daemon.stop() == 0
