"""A small read-only web page at /ui/: agents, conversations, the memory inspector, the audit trail.

Server-rendered from Jinja2 templates (templates/: a base layout and one
template per page) with autoescape always on, and no JavaScript. The pages
only read. `routes` gathers each page's context, `access` decides who may see
it (the bearer token, or a cookie holding an HMAC of it), `render` adds the
headers every page carries, `views` holds the helpers the templates call.
"""

from agentd.http.ui.routes import add_ui_routes

__all__ = ["add_ui_routes"]
