"""The /ui/ pages of scheduled jobs: in-process for what they say and refuse, and clicked through in
headless Chromium against a real `agentd run` (agent page → its jobs → one job's fires and deliveries)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.daemon_process import DaemonProcess
from tests.schedule.test_job_reads import ANA, BOT, parts, some_jobs
from tests.support import open_api
from tests.test_ui import CHROMEDRIVER, CHROMIUM, browser, click_through, text_of

__all__ = ["browser"]  # the fixture, shared with tests/test_ui.py


async def test_the_jobs_pages_show_what_the_store_holds_escaped(tmp_path: Path) -> None:
    daemon, client = await open_api(tmp_path, {"bot": BOT})
    try:
        ids = await some_jobs(daemon)
        book, _ = parts(daemon)
        await book.create(ANA, "every 3h", "<b>water</b> & rest", "reminder")
        agent_page = (await client.get("/ui/agents/bot")).text
        assert '<a href="/ui/agents/bot/jobs">scheduled jobs</a>' in agent_page
        page = (await client.get("/ui/agents/bot/jobs")).text
        assert f'<a href="/ui/agents/bot/jobs/{ids["standup"]}">{ids["standup"]}</a>' in page
        assert "At 09:00 on Monday through Friday (Europe/Lisbon)" in page
        assert "&lt;b&gt;water&lt;/b&gt; &amp; rest" in page and "<b>water" not in page
        assert ids["gone"] not in page  # cancelled: only with ?ended=1
        assert ids["gone"] in (await client.get("/ui/agents/bot/jobs?ended=1")).text
        assert '<a href="/agents/bot/jobs">/agents/bot/jobs</a>' in page  # its JSON route
        one = (await client.get(f"/ui/agents/bot/jobs/{ids['standup']}")).text
        deliveries = re.search(r'<h2 id="deliveries">.*', one, re.S)
        assert deliveries is not None
        assert "https://hooks.example/agentd answered HTTP 503" in deliveries.group(0)
        assert "All done." in deliveries.group(0) and ">sent<" in deliveries.group(0)
        missing = await client.get("/ui/agents/bot/jobs/jdeadbeef00")
        assert missing.status_code == 404 and "No job jdeadbeef00 in agent bot." in missing.text
        bad = await client.get("/ui/agents/bot/jobs/no%20such")
        assert bad.status_code == 400 and "Not a job id: no such" in bad.text
        assert (await client.get("/ui/agents/nobody/jobs")).status_code == 404
    finally:
        await client.aclose()
        await daemon.shutdown()


@pytest.mark.skipif(
    not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
    reason="needs Debian's chromium and chromium-driver (/usr/bin/chromium, /usr/bin/chromedriver); "
    ".ci/run installs them",
)
async def test_click_from_the_agent_to_its_jobs_and_one_job(
    tmp_path: Path, browser: webdriver.Chrome
) -> None:
    daemon, client = await open_api(tmp_path, {"bot": BOT})
    try:
        ids = await some_jobs(daemon)
    finally:
        await client.aclose()
        await daemon.shutdown()
    running = await DaemonProcess(tmp_path).start()
    try:
        browser.get(f"{running.url}/ui/agents/bot")
        WebDriverWait(browser, 10).until(lambda d: d.find_element(By.TAG_NAME, "h1").text == "Agent bot")
        click_through(browser, "scheduled jobs", "Jobs of bot")
        rows = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "tbody tr")]
        assert len(rows) == 2 and rows[0].startswith(ids["standup"]) and "every 2h" in rows[1]
        assert "Monday through Friday" in rows[0] and "webhook:ana" in rows[0]
        click_through(browser, "cancelled and done jobs too", "Jobs of bot")
        assert any(
            r.text.startswith(ids["gone"]) and "cancelled" in r.text
            for r in browser.find_elements(By.CSS_SELECTOR, "tbody tr")
        )
        click_through(browser, ids["standup"], f"Job {ids['standup']}")
        assert "Summarise what is still open." in text_of(browser, "#job")
        fires = browser.find_elements(By.XPATH, "//h2[@id='fires']/following-sibling::table[1]//tbody/tr")
        assert len(fires) == 1 and "schedule" in fires[0].text and "run-1" in fires[0].text
        deliveries = browser.find_elements(
            By.XPATH, "//h2[@id='deliveries']/following-sibling::table[1]//tbody/tr"
        )
        assert sorted(d.text.split()[2] for d in deliveries) == ["pending", "sent"]
        click_through(browser, "jobs of bot", "Jobs of bot")
    finally:
        running.stop()
