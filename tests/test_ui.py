"""The /ui/ pages: clicked through in headless Chromium against a real `agentd run`, plus access and escaping."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from agentd.daemon import Daemon
from agentd.http.app import create_app
from agentd.http.ui.access import COOKIE, session_value
from tests.daemon_process import DaemonProcess

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
TOKEN = "s3cret-ui"
ASSISTANT = "memory: {scope: thread, persistent: true}\nchannels: {webhook: {}}\n"
BROKEN = "purpose: will not load\nnonsense_field: 1\n"
SCREENSHOT = Path("/tmp/agentd-ui.png")


def write_workdir(root: Path) -> Path:
    agents = root / "agents"
    agents.mkdir()
    (agents / "assistant.yaml").write_text(ASSISTANT)
    (agents / "broken.yaml").write_text(BROKEN)
    (root / "agentd.yaml").write_text(f"http:\n  token: {TOKEN}\n")
    return agents


# -- access and escaping, in-process (fast) -----------------------------------------------------------


@pytest.fixture
async def ui(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    daemon = Daemon(write_workdir(tmp_path), tmp_path / "data", reload_interval=60)
    await daemon.start()
    transport = httpx.ASGITransport(app=create_app(daemon))
    async with httpx.AsyncClient(transport=transport, base_url="http://agentd") as client:
        yield client
    await daemon.shutdown()


BEARER = {"Authorization": f"Bearer {TOKEN}"}


async def test_the_token_is_traded_once_for_an_httponly_cookie(ui: httpx.AsyncClient) -> None:
    missing = await ui.get("/ui/")
    assert (
        missing.status_code == 401
        and "Token needed" in missing.text
        and "/ui/agents/assistant" not in missing.text
    )
    wrong = await ui.get("/ui/?token=nope")
    assert wrong.status_code == 401 and COOKIE not in wrong.headers.get("set-cookie", "")

    r = await ui.get("/ui/audit?kind=memory&token=" + TOKEN)
    assert r.status_code == 303 and r.headers["location"] == "/ui/audit?kind=memory"
    cookie = r.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/ui" in cookie
    assert TOKEN.lower() not in cookie  # the browser holds an HMAC of the token, not the token
    assert ui.cookies.get(COOKIE) == session_value(TOKEN)

    page = await ui.get("/ui/")
    assert page.status_code == 200 and "/ui/agents/assistant" in page.text
    assert (
        page.headers["cache-control"] == "no-store"
        and "default-src 'none'" in page.headers["content-security-policy"]
    )
    # the cookie opens the pages only, never the JSON API
    assert (await ui.get("/agents")).status_code == 401

    ui.cookies.clear()
    assert (await ui.get("/ui/", headers={"Cookie": f"{COOKIE}=forged"})).status_code == 401
    assert (await ui.get("/ui/", headers=BEARER)).status_code == 200
    assert (await ui.get("/ui/", headers={"Authorization": "Bearer nope"})).status_code == 401

    denied = (await ui.get("/audit", params={"kind": "auth"}, headers=BEARER)).json()["events"]
    reasons = [
        (d["path"], d["reason"]) for e in denied for d in e["data"]["denials"] for _ in range(d["count"])
    ]
    assert ("/ui/", "missing token") in reasons and ("/ui/", "stale session cookie") in reasons
    assert reasons.count(("/ui/", "wrong token")) == 2


async def test_every_value_is_escaped(ui: httpx.AsyncClient) -> None:
    hostile = '<script>alert(1)</script> & "quotes"'
    r = await ui.post(
        "/agents/assistant/messages",
        json={"conversation_id": "x", "text": hostile, "user_id": "<img>x"},  # a user id has no spaces
        headers=BEARER,
    )
    assert r.status_code == 200
    for path in ("/ui/agents/assistant/conversations/webhook:x", "/ui/audit?kind=%3Cb%3E"):
        page = (await ui.get(path, headers=BEARER)).text
        assert "<script>" not in page and "<img" not in page and "<b>" not in page
    page = (await ui.get("/ui/agents/assistant/conversations/webhook:x", headers=BEARER)).text
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &#34;quotes&#34;" in page  # Jinja's autoescape
    assert "user (&lt;img&gt;x)" in page


@pytest.mark.parametrize(
    ("path", "status", "text"),
    [
        ("/ui/agents/nobody", 404, "No agent named nobody"),
        ("/ui/agents/broken", 503, "Agent broken is"),
        ("/ui/agents/assistant/conversations/no-colon", 400, "Not a conversation key"),
        ("/ui/agents/assistant/conversations/webhook:a%20b", 400, "Not a conversation key"),
        ("/ui/audit?agent=ghost", 404, "No agent named ghost"),
        (
            "/ui/audit?kind=memories",
            400,
            "Unknown audit kind memories: expected one of auth, budget, channel,",
        ),
    ],
)
async def test_bad_pages_say_why(ui: httpx.AsyncClient, path: str, status: int, text: str) -> None:
    r = await ui.get(path, headers=BEARER)
    assert r.status_code == status and text in r.text and r.headers["content-type"].startswith("text/html")


@pytest.mark.parametrize(
    ("path", "api"),
    [
        ("/ui/", ["/agents"]),
        ("/ui/agents/assistant", ["/agents/assistant/runs"]),
        (
            "/ui/agents/assistant/conversations/webhook:x",
            ["/agents/assistant/conversations/webhook:x", "/agents/assistant/conversations/webhook:x/memory"],
        ),
        ("/ui/audit?agent=assistant&kind=memory", ["/audit?agent=assistant&kind=memory"]),
    ],
)
async def test_each_page_links_its_json_route_and_says_it_needs_the_token(
    ui: httpx.AsyncClient, path: str, api: list[str]
) -> None:
    page = (await ui.get(path, headers=BEARER)).text
    note = re.search(r'<p class="api muted">(.*?)</p>', page, re.S)
    assert note, page
    assert [html.unescape(h) for h in re.findall(r'<a href="([^"]*)">', note.group(1))] == api
    assert "Authorization: Bearer &lt;http.token&gt;" in note.group(1)
    for href in api:
        assert (await ui.get(href)).status_code == 401
        assert (await ui.get(href, headers=BEARER)).status_code == 200


# -- the browser, against `agentd run` --------------------------------------------------------------------


class UiDaemon(DaemonProcess):
    """`agentd run` with the token set; Ana talks to the assistant."""

    def __init__(self, root: Path):
        super().__init__(root, reload_interval=5, headers=BEARER)

    def say(self, conversation: str, text: str) -> None:  # type: ignore[override]
        super().say(text, conversation=conversation, user_id="ana")


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[UiDaemon]:
    write_workdir(tmp_path)
    process = UiDaemon(tmp_path)
    await process.start()
    yield process
    process.stop()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1280,1100",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        options.add_argument(arg)
    # an explicit driver path: Selenium Manager never runs, so nothing is downloaded
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(20)
    yield driver
    driver.quit()


def click_through(driver: webdriver.Chrome, link_text: str, title: str) -> None:
    driver.find_element(By.LINK_TEXT, link_text).click()
    WebDriverWait(driver, 10).until(lambda d: d.find_element(By.TAG_NAME, "h1").text == title)


def text_of(driver: webdriver.Chrome, css: str = "main") -> str:
    return str(driver.find_element(By.CSS_SELECTOR, css).text)


@pytest.mark.skipif(
    not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
    reason="needs Debian's chromium and chromium-driver (/usr/bin/chromium, /usr/bin/chromedriver); "
    ".ci/run installs them",
)
def test_click_from_agents_to_conversation_inspector_and_audit(
    daemon: UiDaemon, browser: webdriver.Chrome
) -> None:
    daemon.say("ui-1", "hello there")
    daemon.say("ui-1", "remember color: blue")

    browser.get(f"{daemon.url}/ui/")
    assert text_of(browser, "h1") == "Token needed"
    browser.get(f"{daemon.url}/ui/?token={TOKEN}")
    WebDriverWait(browser, 10).until(lambda d: d.find_element(By.TAG_NAME, "h1").text == "Agents")
    assert browser.current_url == f"{daemon.url}/ui/"  # the token left the address bar
    [cookie] = browser.get_cookies()
    assert cookie["name"] == COOKIE and cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"

    rows = {
        r.find_element(By.TAG_NAME, "td").text: r.text
        for r in browser.find_elements(By.CSS_SELECTOR, "tbody tr")
    }
    assert "running" in rows["assistant"] and "offline/offline" in rows["assistant"]
    assert "scope: thread, persistent" in rows["assistant"] and "webhook: running" in rows["assistant"]
    assert "error" in rows["broken"] and "nonsense_field" in rows["broken"]

    click_through(browser, "assistant", "Agent assistant")
    assert "webhook:ui-1" in text_of(browser) and "offline/offline" in text_of(browser)
    assert (
        len(browser.find_elements(By.XPATH, "//h2[.='Recent runs']/following-sibling::table[1]//tbody/tr"))
        == 2
    )

    click_through(browser, "webhook:ui-1", "Conversation webhook:ui-1")
    # what the model will see next starts with its system prompt, persistent keys included
    assert "Keys you already have:\n- color" in text_of(browser, "#system-prompt")
    layers = browser.find_elements(By.CSS_SELECTOR, "section.layer")
    assert [layer.find_element(By.TAG_NAME, "h3").text for layer in layers] == ["full", "persistent memory"]
    inspector = layers[0].text
    assert (
        "hello there" in inspector
        and "remember color: blue" in inspector
        and "compacts at (tokens)" in inspector
        and "compact_at_tokens" not in inspector
    )
    assert "color" in layers[1].text
    transcript = browser.find_elements(
        By.XPATH, "//h2[@id='transcript']/following-sibling::div[contains(@class,'msg')]"
    )
    assert [m.find_element(By.CLASS_NAME, "role").text for m in transcript] == [
        "user (ana)",
        "assistant",
        "user (ana)",
        "assistant",
        "tool",
        "assistant",
    ]
    assert browser.save_screenshot(str(SCREENSHOT))
    # a persistent value is read on demand: its key links to a page of its own
    assert "blue" not in text_of(browser, "#persistent-memory")
    click_through(browser, "color", "Memory color")
    assert text_of(browser, "#memory-value") == "blue"

    click_through(browser, "Audit", "Audit trail")
    Select(browser.find_element(By.NAME, "agent")).select_by_visible_text("assistant")
    kinds = Select(browser.find_element(By.NAME, "kind"))
    assert [o.text for o in kinds.options][:2] == ["any", "auth"]  # a choice of the known kinds
    kinds.select_by_visible_text("memory")
    browser.find_element(By.CSS_SELECTOR, "form button").click()
    WebDriverWait(browser, 10).until(lambda d: "kind=memory" in d.current_url)
    assert "agent=assistant" in browser.current_url
    events = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "tbody tr")]
    assert (
        len(events) == 1
        and "memory" in events[0]
        and "remember" in events[0]
        and '"key": "color"' in events[0]
    )
    assert Select(browser.find_element(By.NAME, "agent")).first_selected_option.text == "assistant"
    assert Select(browser.find_element(By.NAME, "kind")).first_selected_option.text == "memory"
    click_through(
        browser, "webhook:ui-1", "Conversation webhook:ui-1"
    )  # the audit row links to its conversation

    # the page can reload itself (a meta refresh: still no JavaScript): new messages show up unasked
    click_through(browser, "auto-refresh every 10 s", "Conversation webhook:ui-1")
    assert "reloading every 10 s" in text_of(browser, "header")
    browser.get(browser.current_url.replace("refresh=10", "refresh=1"))
    daemon.say("ui-1", "are you still there?")
    WebDriverWait(browser, 10).until(lambda d: "are you still there?" in d.page_source)
