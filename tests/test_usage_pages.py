"""The /ui/usage page: spend per day as a chart, the top people and agents, who is near a limit; in
process (test_ui_pages.py's way) and in headless Chromium against the daemon served on loopback."""

from __future__ import annotations

import asyncio
import html
import re
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from agentd.http.ui.usage_chart import HEIGHT, spend_chart
from tests.support import daemon_on_loopback, send, serving
from tests.test_ui import CHROMEDRIVER, CHROMIUM, browser  # noqa: F401 - the fixture, shared
from tests.test_ui_pages import element

AGENT = "memory: {scope: thread}\nchannels: {webhook: {}}\n"
PRICED = 'prices: {offline/offline: {input: 1000, output: 1000}}\nbudgets: [{per: person, limit: "200 tokens/day"}]\n'


async def test_the_usage_page_shows_spend_the_top_spenders_and_who_is_near_a_limit(tmp_path: Path) -> None:
    (tmp_path / "agentd.yaml").write_text(PRICED)
    async with serving(tmp_path, {"bot": AGENT, "helper": AGENT}) as (_daemon, client):
        for n in range(6):
            await send(client, "bot", "c1", f"a message with a few words, number {n}", user_id="ana")
        await send(client, "helper", "c2", "hi", user_id="bob")
        page = (await client.get("/ui/usage")).text
        api = (await client.get("/usage")).json()
    people = element(page, "top-people")
    assert people.index("webhook:ana") < people.index("webhook:bob")  # the biggest spender first
    assert "bot" in element(page, "top-agents") and "helper" in element(page, "top-agents")
    near = html.unescape(element(page, "near-limit"))
    assert [n["subject"] for n in api["near_limit"]] == ["webhook:ana"] and "webhook:ana" in near
    assert "200 tokens" in near
    # the offline model reports no usage: its counts are marked as estimates
    assert f"({api['total']['estimated_calls']} calls estimated)" in page
    assert re.findall(r'<rect class="bar"', page) == ['<rect class="bar"']  # one day of usage, one bar
    assert f'height="{HEIGHT}"' in page  # the peak day is the full height


def test_the_chart_leaves_days_without_usage_as_gaps() -> None:
    groups = [
        {"day": "2026-12-01", "cost": 1.0, "estimated": False},
        {"day": "2026-12-03", "cost": 0.25, "estimated": True},
    ]
    chart = spend_chart(groups, "2026-12-01", "2026-12-04")
    assert [(b["day"], b["h"], b["estimated"]) for b in chart["bars"]] == [
        ("2026-12-01", HEIGHT, False),
        ("2026-12-03", HEIGHT // 4, True),
    ]
    assert chart["bars"][1]["x"] == pytest.approx(2 * 720 / 4 + 720 / 4 * 0.1)


@pytest.mark.skipif(
    not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
    reason="needs Debian's chromium and chromium-driver (/usr/bin/chromium, /usr/bin/chromedriver); "
    ".ci/run installs them",
)
async def test_the_usage_page_in_a_browser_draws_the_days_spend(
    tmp_path: Path,
    browser: webdriver.Chrome,  # noqa: F811
) -> None:
    async with daemon_on_loopback(tmp_path, {"bot": AGENT}, PRICED) as (_daemon, url):
        async with httpx.AsyncClient(base_url=url) as client:
            for n in range(3):
                await send(client, "bot", "c1", f"hello {n}", user_id="ana")

        def look() -> None:  # (the browser blocks: in a thread, so the daemon's loop goes on serving)
            browser.get(url + "/ui/")
            browser.find_element(By.LINK_TEXT, "Usage").click()
            WebDriverWait(browser, 10).until(lambda d: d.find_element(By.TAG_NAME, "h1").text == "Usage")
            [bar] = browser.find_elements(By.CSS_SELECTOR, "#spend-chart rect.bar")
            assert bar.size["height"] == HEIGHT and bar.size["width"] > 0  # drawn, at the peak's full height
            assert "webhook:ana" in browser.find_element(By.ID, "top-people").text
            assert browser.find_element(By.ID, "total-cost").text.startswith("$")

        await asyncio.to_thread(look)
