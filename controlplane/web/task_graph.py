"""A Change's Task graph as an SVG picture: Tasks in columns by dependency depth (a Task stands right of
everything it depends on), edges from each dependency to its dependent, each node coloured by status and
labelled with it (colour is never the only signal), and a link to the Task's latest run."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from markupsafe import escape

NODE_W, NODE_H, GAP_X, GAP_Y, PAD = 190, 52, 70, 22, 12
COLOURS = {  # fill, stroke: the status is written in the node too
    "succeeded": ("#e3f4e6", "#2e7d32"),
    "failed": ("#fde7e7", "#c62828"),
    "cancelled": ("#eeeeee", "#616161"),
    "running": ("#e3eefc", "#1565c0"),
    "ready": ("#fff6dc", "#a66f00"),
    "blocked": ("#fff0e0", "#b34700"),
}
DEFAULT_COLOUR = ("#f5f5f5", "#757575")


@dataclasses.dataclass(frozen=True)
class Node:
    key: str
    status: str
    depends_on: tuple[str, ...]
    href: str = ""


def depths(nodes: Sequence[Node]) -> dict[str, int]:
    """Each Task's column: 0 without dependencies, else one more than its deepest dependency."""
    by_key = {n.key: n for n in nodes}
    out: dict[str, int] = {}

    def depth(key: str, seen: frozenset[str]) -> int:
        if key in out:
            return out[key]
        deps = [d for d in by_key[key].depends_on if d in by_key and d not in seen]
        out[key] = 1 + max((depth(d, seen | {key}) for d in deps), default=-1)
        return out[key]

    for node in nodes:
        depth(node.key, frozenset())
    return out


def svg(nodes: Sequence[Node]) -> str:
    column = depths(nodes)
    rows: dict[int, list[Node]] = {}
    for node in sorted(nodes, key=lambda n: n.key):
        rows.setdefault(column[node.key], []).append(node)
    at = {n.key: (c, r) for c, members in rows.items() for r, n in enumerate(members)}

    def corner(key: str) -> tuple[int, int]:
        c, r = at[key]
        return PAD + c * (NODE_W + GAP_X), PAD + r * (NODE_H + GAP_Y)

    width = PAD * 2 + (max(rows, default=0) + 1) * (NODE_W + GAP_X) - GAP_X
    height = PAD * 2 + max((len(m) for m in rows.values()), default=1) * (NODE_H + GAP_Y) - GAP_Y
    label = "; ".join(
        f"{n.key}: {n.status}" + (f", after {', '.join(n.depends_on)}" if n.depends_on else "") for n in nodes
    )
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="task-graph" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="Task graph: {escape(label)}">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" markerHeight="8" '
        'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#555"/></marker></defs>',
    ]
    for node in nodes:
        x2, y2 = corner(node.key)
        for dep in node.depends_on:
            if dep in at:
                x1, y1 = corner(dep)
                parts.append(
                    f'<line class="edge" data-from="{escape(dep)}" data-to="{escape(node.key)}" x1="{x1 + NODE_W}" '
                    f'y1="{y1 + NODE_H // 2}" x2="{x2}" y2="{y2 + NODE_H // 2}" stroke="#555" '
                    'stroke-width="1.5" marker-end="url(#arrow)"/>'
                )
    for node in nodes:
        x, y = corner(node.key)
        fill, stroke = COLOURS.get(node.status, DEFAULT_COLOUR)
        box = (
            f'<g class="node" data-key="{escape(node.key)}" data-status="{escape(node.status)}">'
            f'<rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="6" fill="{fill}" stroke="{stroke}" '
            'stroke-width="2"/>'
            f'<text x="{x + 10}" y="{y + 21}" font-weight="bold" font-size="14">{escape(node.key[:24])}</text>'
            f'<text x="{x + 10}" y="{y + 40}" font-size="12" fill="{stroke}">{escape(node.status)}</text></g>'
        )
        parts.append(f'<a href="{escape(node.href)}">{box}</a>' if node.href else box)
    parts.append("</svg>")
    return "".join(parts)
