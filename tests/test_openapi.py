"""The OpenAPI tells the truth and is behind the token; /docs works offline, from files agentd serves.

(schemathesis with every check runs against a daemon in CI: .ci/openapi.)
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from agentd.daemon import Daemon
from agentd.http.ui.access import COOKIE
from tests.daemon_process import DaemonProcess
from tests.support import open_api
from tests.test_ui import CHROMEDRIVER, CHROMIUM, browser

__all__ = ["browser"]  # the fixture, shared with the /ui/ browser test
TOKEN = "s3cret"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
AGENT = "memory: {scope: thread, persistent: true}\nchannels: {webhook: {}}\n"

OPEN_PATHS = {"/healthz", "/readyz"}  # liveness and readiness: probes carry no token


@pytest.fixture
async def secured(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    daemon, client = await open_api(tmp_path, {"assistant": AGENT}, token=TOKEN)
    yield client
    await client.aclose()
    await daemon.shutdown()


@pytest.fixture
async def open_daemon(tmp_path: Path) -> AsyncIterator[tuple[Daemon, httpx.AsyncClient]]:
    (tmp_path / "open").mkdir()
    daemon, client = await open_api(tmp_path / "open", {"assistant": AGENT})
    yield daemon, client
    await client.aclose()
    await daemon.shutdown()


def operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(path, method, op) for path, item in schema["paths"].items() for method, op in item.items()]


async def test_the_schema_needs_the_token(secured: httpx.AsyncClient) -> None:
    r = await secured.get("/openapi.json")
    assert r.status_code == 401 and "missing bearer token" in r.json()["error"]
    assert (await secured.get("/openapi.json", headers=BEARER)).status_code == 200


async def test_every_operation_documents_its_errors_in_the_one_error_shape(
    secured: httpx.AsyncClient,
) -> None:
    schema = (await secured.get("/openapi.json", headers=BEARER)).json()
    assert "HTTPValidationError" not in str(schema)  # FastAPI's 422 shape is not what agentd answers
    for path, method, op in operations(schema):
        # the OpenAI-compatible routes refuse in OpenAI's shape (its clients read that); the rest in agentd's
        shape = "OpenAIErrorOut" if path.startswith("/v1/") else "ErrorOut"
        statuses = set(op["responses"]) - {"200"}
        if path not in OPEN_PATHS:
            assert "401" in statuses, (method, path)
        for status in statuses:
            body = op["responses"][status]["content"]["application/json"]["schema"]
            assert body == {"$ref": f"#/components/schemas/{shape}"}, (method, path, status)
    messages = schema["paths"]["/agents/{agent}/messages"]["post"]["responses"]
    assert {"400", "401", "404", "413", "422", "503"} <= set(messages)


async def test_bearer_auth_is_declared_only_when_a_token_is_set(
    secured: httpx.AsyncClient, open_daemon: tuple[Daemon, httpx.AsyncClient]
) -> None:
    schema = (await secured.get("/openapi.json", headers=BEARER)).json()
    assert schema["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "http.token from agentd.yaml",
    }
    for path, method, op in operations(schema):
        assert op.get("security") == ([] if path in OPEN_PATHS else [{"bearer": []}]), (method, path)
    _daemon, client = open_daemon
    unsecured = (await client.get("/openapi.json")).json()
    assert "securitySchemes" not in unsecured.get("components", {})
    assert all("security" not in op for _path, _method, op in operations(unsecured))


async def test_the_docs_need_the_token_and_serve_their_own_assets(secured: httpx.AsyncClient) -> None:
    refused = await secured.get("/docs")
    assert refused.status_code == 401 and "/docs?token=" in refused.text
    assert (await secured.get("/docs/assets/swagger-ui-bundle.js")).status_code == 401
    assert (await secured.get("/docs/openapi.json")).status_code == 401

    traded = await secured.get(f"/docs?token={TOKEN}")
    assert traded.status_code == 303 and traded.headers["location"] == "/docs"
    assert "path=/docs" in traded.headers["set-cookie"].lower()
    page = await secured.get("/docs")  # the client keeps the cookie, as a browser would
    assert page.status_code == 200
    # nothing but this server: every src/href is a path here, and the CSP forbids other origins
    links = re.findall(r'(?:src|href)="([^"]*)"', page.text)
    assert links and all(link.startswith("/docs/") for link in links), links
    assert "default-src 'self'" in page.headers["content-security-policy"]
    for name, kind in (("swagger-ui-bundle.js", "text/javascript"), ("swagger-ui.css", "text/css")):
        asset = await secured.get(f"/docs/assets/{name}")
        assert asset.status_code == 200 and asset.headers["content-type"].startswith(kind)
        assert len(asset.content) > 10_000
    assert (await secured.get("/docs/openapi.json")).json()["info"]["title"] == "agentd"
    # the cookie opens the docs only: never the API, nor the schema at its API address
    assert (await secured.get("/openapi.json")).status_code == 401
    assert (await secured.get("/agents")).status_code == 401
    assert secured.cookies.get(COOKIE) is not None


async def test_the_webhooks_multipart_upload_is_described_beside_its_json_body(
    secured: httpx.AsyncClient,
) -> None:
    schema = (await secured.get("/openapi.json", headers=BEARER)).json()
    body = schema["paths"]["/agents/{agent}/messages"]["post"]["requestBody"]["content"]
    assert set(body) == {"application/json", "multipart/form-data"}
    form, json_body = body["multipart/form-data"], body["application/json"]["schema"]
    fields = form["schema"]["properties"]
    # the JSON body's fields, and the files; a text field is never null (`attachments` is a JSON part)
    assert set(fields) == {*json_body["properties"], "file"}
    assert all("'null'" not in str(v) for k, v in fields.items() if k != "attachments")
    assert fields["file"]["items"] == {
        "type": "string",
        "format": "binary",
        "contentMediaType": "application/octet-stream",
    }
    assert form["schema"]["required"] == ["conversation_id"] and not form["schema"]["additionalProperties"]
    assert form["encoding"] == {"attachments": {"contentType": "application/json"}}
    assert {"required": ["file"], "properties": {"file": {"minItems": 1}}} in form["schema"]["anyOf"]
    # what it describes is what is taken: epoch seconds as the text a form field is, a file alone
    sent = await secured.post(
        "/agents/assistant/messages",
        headers=BEARER,
        data={"conversation_id": "up", "sent_at": "1767225600", "user_id": "ana"},
        files={"file": ("notes.txt", b"hello", "text/plain")},
    )
    assert sent.status_code == 200, sent.text
    refused = await secured.post(
        "/agents/assistant/messages",
        headers=BEARER,
        data={"conversation_id": "up", "text": "hi", "sent_at": "yesterday"},
        files={"file": ("notes.txt", b"hello", "text/plain")},
    )
    assert refused.status_code == 422 and "sent_at" in refused.text


@pytest.mark.skipif(
    not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
    reason="needs Debian's chromium and chromium-driver; .ci/run installs them",
)
async def test_swagger_ui_renders_the_api_in_a_browser_with_no_cdn(
    tmp_path: Path, browser: webdriver.Chrome
) -> None:
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "assistant.yaml").write_text(AGENT)
    (tmp_path / "agentd.yaml").write_text(f"http:\n  token: {TOKEN}\n")
    daemon = await DaemonProcess(tmp_path, headers=BEARER).start()
    try:
        browser.get(f"{daemon.url}/docs?token={TOKEN}")
        WebDriverWait(browser, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".opblock-summary-path"))
        paths = {
            e.text.replace("\u200b", "")
            for e in browser.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")
        }
        assert {"/agents/{agent}/messages", "/metrics", "/agents/{agent}/conversations"} <= paths
        assert browser.find_element(By.CSS_SELECTOR, ".btn.authorize")  # the bearer token can be entered
        # every resource the page loaded came from the daemon itself
        loaded = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
        assert loaded and all(url.startswith(daemon.url) for url in loaded), loaded
    finally:
        daemon.stop()
