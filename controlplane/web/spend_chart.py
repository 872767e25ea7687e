"""Spend charts for the console, as SVG bar charts with their numbers written on them: by project, tier,
member and day, summed over the Changes the token may see (each Change's spend by tier and member)."""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable, Sequence

from markupsafe import Markup, escape

from drover.models import Change, Spend

BAR_H, GAP, LABEL_W, BAR_W, VALUE_W = 22, 8, 180, 320, 90


@dataclasses.dataclass(frozen=True)
class Chart:
    title: str
    rows: tuple[tuple[str, int], ...]  # label, micro-dollars

    @property
    def svg(self) -> Markup:
        return bars(self.title, self.rows)


def charts(spends: Iterable[tuple[Change, Spend]]) -> list[Chart]:
    by: dict[str, collections.Counter[str]] = {k: collections.Counter() for k in ("project", "tier", "member", "day")}
    for change, spend in spends:
        day = change.created_at.strftime("%Y-%m-%d") if change.created_at else "unknown"
        for line in spend.lines:
            by["project"][change.project] += line.cost_micros
            by["tier"][line.tier or "(none)"] += line.cost_micros
            by["member"][line.member or line.model or "(none)"] += line.cost_micros
            by["day"][day] += line.cost_micros
    return [
        Chart("Spend by project", tuple(by["project"].most_common(12))),
        Chart("Spend by tier", tuple(by["tier"].most_common())),
        Chart("Spend by member", tuple(by["member"].most_common(12))),
        Chart("Spend by day (the day each Change was submitted)", tuple(sorted(by["day"].items())[-14:])),
    ]


def bars(title: str, rows: Sequence[tuple[str, int]]) -> Markup:
    if not rows:
        return Markup(f'<p class="empty">{escape(title)}: no spend yet.</p>')
    top = max(v for _, v in rows) or 1
    height = len(rows) * (BAR_H + GAP)
    width = LABEL_W + BAR_W + VALUE_W
    label = "; ".join(f"{name}: ${value / 1e6:,.4f}" for name, value in rows)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}: {escape(label)}">'
    ]
    for i, (name, value) in enumerate(rows):
        y = i * (BAR_H + GAP)
        w = max(1, round(BAR_W * value / top))
        out.append(
            f'<text x="{LABEL_W - 8}" y="{y + 16}" text-anchor="end" font-size="13">{escape(name[:28])}</text>'
            f'<rect x="{LABEL_W}" y="{y}" width="{w}" height="{BAR_H}" fill="#3b6ea5"/>'
            f'<text x="{LABEL_W + w + 6}" y="{y + 16}" font-size="13">${value / 1e6:,.4f}</text>'
        )
    out.append("</svg>")
    return Markup("".join(out))
