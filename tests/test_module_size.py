"""The 400-line rule: a product module past it holds more than one idea (split it by idea, not by count).
The test kit (testkit/) and the tests are not product modules."""

from __future__ import annotations

from pathlib import Path

LIMIT = 400
PACKAGE = Path(__file__).parent.parent / "agentd"


def test_every_product_module_is_under_the_line_limit() -> None:
    sizes = {p.relative_to(PACKAGE.parent): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    assert len(sizes) > 100  # the package was found
    assert {str(p): n for p, n in sizes.items() if n >= LIMIT} == {}
