"""The OpenAPI document and /docs (Swagger UI), both behind the token, and working offline.

`/openapi.json` is an API route like the others (the bearer token). `/docs` is a page:
like /ui/ it takes the bearer token, or `?token=` once, traded for a cookie scoped to
/docs that also opens the page's assets and `/docs/openapi.json`, which the page
reads. Swagger UI's files come from the installed `fastapi-offline` package, never a
CDN, and the page's Content-Security-Policy allows nothing but this server.

With a token set, the document declares bearer authentication on every route that
needs it, and `security: []` on those that do not (/healthz), so clients (and
schemathesis) know; without one it declares none. The document names its server
relatively (`/`: wherever it was fetched from, as a daemon does not know the address
it is reached by) and the project's license, which generic validators ask for.
"""

from __future__ import annotations

from importlib.resources import files
from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.routing import APIRoute

from agentd.http.auth import TokenCheck
from agentd.http.directory import AgentDirectory
from agentd.http.errors import ApiError
from agentd.http.ui.access import check_access

ASSETS = files("fastapi_offline") / "static"
ASSET_TYPES = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "favicon.png": "image/png",
}
DOCS_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": "default-src 'self'; script-src 'self' 'unsafe-inline'; "
    "style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'",
    "Referrer-Policy": "no-referrer",
}
BEARER = "bearer"
SERVERS = [{"url": "/", "description": "the daemon that serves this document"}]
LICENSE = {"name": "MIT", "identifier": "MIT"}  # LICENSE at the repository's root


def add_docs_routes(app: FastAPI, directory: AgentDirectory, require_token: TokenCheck) -> None:
    cached: dict[str, Any] = {}

    def document() -> dict[str, Any]:
        if not cached:
            cached.update(_openapi(app, require_token, directory.token is not None))
        return cached

    @app.get("/openapi.json", include_in_schema=False)
    async def openapi(request: Request) -> JSONResponse:
        await require_token(request)
        return JSONResponse(document())

    async def page_access(request: Request) -> Response | None:
        return await check_access(request, directory, area="/docs")

    @app.get("/docs", include_in_schema=False)
    async def docs(request: Request) -> Response:
        denied = await page_access(request)
        if denied is not None:
            return denied
        page = get_swagger_ui_html(
            openapi_url="/docs/openapi.json",
            title="agentd API",
            swagger_js_url="/docs/assets/swagger-ui-bundle.js",
            swagger_css_url="/docs/assets/swagger-ui.css",
            swagger_favicon_url="/docs/assets/favicon.png",
            oauth2_redirect_url=None,
        )
        page.headers.update(DOCS_HEADERS)
        return page

    @app.get("/docs/openapi.json", include_in_schema=False)
    async def docs_openapi(request: Request) -> Response:
        denied = await page_access(request)
        return (
            denied if denied is not None else JSONResponse(document(), headers={"Cache-Control": "no-store"})
        )

    @app.get("/docs/assets/{name}", include_in_schema=False)
    async def asset(request: Request, name: str) -> Response:
        denied = await page_access(request)
        if denied is not None:
            return denied
        if name not in ASSET_TYPES:
            raise ApiError(404, f"no asset {name!r}")
        return FileResponse(str(ASSETS / name), media_type=ASSET_TYPES[name])


def _openapi(app: FastAPI, require_token: TokenCheck, token_set: bool) -> dict[str, Any]:
    schema = get_openapi(
        title=app.title,
        version=app.version,
        description=app.description,
        routes=app.routes,
        servers=SERVERS,
        license_info=LICENSE,
    )
    if not token_set:
        return schema
    schema.setdefault("components", {})["securitySchemes"] = {
        BEARER: {"type": "http", "scheme": "bearer", "description": "http.token from agentd.yaml"}
    }
    for route in app.routes:
        if not isinstance(route, APIRoute) or not route.include_in_schema:
            continue
        needs_token = any(dep.dependency is require_token for dep in route.dependencies)
        for method in route.methods or ():
            # `[]`: explicitly open, not "whatever the document's default is"
            schema["paths"][route.path_format][method.lower()]["security"] = (
                [{BEARER: []}] if needs_token else []
            )
    return schema
