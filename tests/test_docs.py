"""The documentation a newcomer navigates: README.md is a short front door that links every page of
docs/, and every relative link of README.md and docs/*.md (pictures too) reaches an existing file and,
with `#anchor`, an existing heading of it (GitHub's heading ids)."""

from __future__ import annotations

import pathlib
import re

import pytest

from tests.conftest import ROOT

README_MAX_LINES = 260
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
"""A Markdown link or picture: `[text](target)`, `![alt](target)`."""


def documents(root: pathlib.Path = ROOT) -> list[pathlib.Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def prose(text: str) -> str:
    """The text outside fenced code blocks and inline code spans, where links are links."""
    kept, fenced = [], False
    for line in text.splitlines():
        if re.match(r"\s*```", line):
            fenced = not fenced
            kept.append("")
            continue
        kept.append("" if fenced else line)
    return re.sub(r"`[^`]*`", "", "\n".join(kept))


def heading_ids(text: str) -> set[str]:
    """GitHub's ids of the headings: lower case, punctuation dropped, spaces to `-`, repeats numbered."""
    ids: set[str] = set()
    for line in prose(text).splitlines():
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        base = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
        slug, n = base, 0
        while slug in ids:
            n += 1
            slug = f"{base}-{n}"
        ids.add(slug)
    return ids


def relative_links(path: pathlib.Path) -> list[str]:
    return [t for t in LINK.findall(prose(path.read_text())) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def broken_links(path: pathlib.Path) -> list[str]:
    """The relative links of one Markdown file that reach no file, or no heading of it."""
    broken = []
    for target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{target}: no file {linked}")
        elif anchor and linked.suffix == ".md" and anchor not in heading_ids(linked.read_text()):
            broken.append(f"{target}: {linked.name} has no heading #{anchor}")
    return broken


def test_every_relative_link_of_the_docs_resolves() -> None:
    found = {path: relative_links(path) for path in documents()}
    assert sum(map(len, found.values())) > 20, "the link extraction found almost nothing: it is broken"
    broken = [f"{path.relative_to(ROOT)}: {problem}" for path in documents() for problem in broken_links(path)]
    assert not broken, "links that lead nowhere:\n" + "\n".join(broken)


def test_the_readme_links_every_docs_page() -> None:
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert len(pages) >= 9, pages
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in relative_links(ROOT / "README.md")}
    assert [p for p in pages if (ROOT / "docs" / p).resolve() not in linked] == []


def test_every_docs_page_says_what_it_holds_and_links_back() -> None:
    for page in sorted((ROOT / "docs").glob("*.md")):
        lines = page.read_text().splitlines()
        assert lines[0].startswith("# ") and lines[2].strip(), f"{page.name}: a title, then a one-line summary"
        assert "](../README.md)" in "\n".join(lines[:6]), f"{page.name}: no link back to the README at the top"


def test_the_readme_is_a_short_front_door() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/"


def test_every_benchmark_is_shown_with_its_command_in_performance() -> None:
    """docs/performance.md's command block names how to run each benchmarks/*.py."""
    text = (ROOT / "docs" / "performance.md").read_text()
    missing = [p.name for p in sorted((ROOT / "benchmarks").glob("*.py")) if f"python benchmarks/{p.name}" not in text]
    assert not missing, f"benchmarks docs/performance.md does not show how to run: {missing}"


def test_every_change_file_shown_loads(tmp_path: pathlib.Path) -> None:
    """Each ```yaml block with `tasks:` is a Change file `drover submit` accepts (unknown keys are errors)."""
    from drover import changefile

    shown = [(doc, block) for doc in documents() for block in re.findall(r"```yaml\n(.*?)```", doc.read_text(), re.S)]
    changes = [(doc, block) for doc, block in shown if re.search(r"^tasks:", block, re.M)]
    assert len(changes) >= 2, "the README's tour and docs/getting-started.md each show a Change file"
    for n, (doc, block) in enumerate(changes):
        path = tmp_path / f"change{n}.yaml"
        path.write_text(block)
        assert changefile.load(path)["tasks"], doc.relative_to(ROOT)


@pytest.mark.parametrize(
    ("text", "broken"),
    [
        ("[ok](other.md) and ![pic](pic.png)", []),
        ("[gone](missing.md)", ["missing.md"]),
        ("[anchor](other.md#a-heading-here) [bad](other.md#nope)", ["other.md#nope"]),
        ("[self](#top-matter) [bad](#nope)", ["#nope"]),
        ("`[not a link](missing.md)`\n```\n[neither](missing.md)\n```\n[web](https://example.com/x)", []),
    ],
)
def test_broken_links_are_found(tmp_path: pathlib.Path, text: str, broken: list[str]) -> None:
    (tmp_path / "other.md").write_text("# Other\n\n## A heading, here!\n")
    (tmp_path / "pic.png").write_bytes(b"")
    page = tmp_path / "page.md"
    page.write_text(f"# Top matter\n\n{text}\n")
    assert [problem.split(":")[0] for problem in broken_links(page)] == broken
