"""The usage page's chart: one bar per UTC day of the span (days without usage are gaps), drawn as SVG
rectangles whose sizes are computed here, so the page needs no script."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

WIDTH, HEIGHT = 720, 160
MIN_BAR = 1  # a day that spent anything shows at least this many pixels


def spend_chart(groups: list[dict[str, Any]], since: str, until: str) -> dict[str, Any]:
    by_day = {g["day"]: g for g in groups}
    first, last = date.fromisoformat(since), date.fromisoformat(until)
    days = [(first + timedelta(days=n)).isoformat() for n in range((last - first).days + 1)]
    peak = max((g["cost"] for g in groups), default=0.0)
    step = WIDTH / len(days)
    bars = []
    for n, day in enumerate(days):
        group = by_day.get(day)
        if group is None or not group["cost"]:
            continue
        height = max(MIN_BAR, round(HEIGHT * group["cost"] / peak))
        bars.append(
            {
                "day": day,
                "cost": group["cost"],
                "estimated": group["estimated"],
                "x": round(n * step + step * 0.1, 1),
                "w": round(max(step * 0.8, 1), 1),
                "y": HEIGHT - height,
                "h": height,
            }
        )
    return {"width": WIDTH, "height": HEIGHT, "bars": bars, "peak": peak}
