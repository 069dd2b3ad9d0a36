"""The README is the front door: short, and every link in it and in the docs leads somewhere.

A README that grows back into a manual hides "install, make a pool" below benchmark tables,
and a moved section leaves links to files or headings that no longer exist; GitHub renders
both without complaint, so only a test notices. Checked here: README.md's length, every
relative link (and its heading anchor, by GitHub's rules) in README.md, docs/*.md and
bench/README.md, and that the README's docs index lists every file under docs/.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
README_MAX_LINES = 220
DOCS_INDEX_HEADING = "## Docs index"
CHECKED = [README, ROOT / "bench" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE_CODE = re.compile(r"`[^`]*`")
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks, with inline code removed: links and headings in
    code are examples, not links."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(_INLINE_CODE.sub("", line))
    return lines


def _slug(heading: str) -> str:
    """GitHub's heading anchor: markup dropped, lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor GitHub makes for the headings of a Markdown file (repeats get -1, -2, ...)."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in path.read_text().splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else _HEADING.match(line)
        if match is None:
            continue
        slug = _slug(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def relative_links(path: Path) -> list[str]:
    """The link targets of a Markdown file that point into the repository."""
    targets = []
    for line in _prose_lines(path.read_text()):
        for target in _LINK.findall(line):
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):
                targets.append(target)
    return targets


def test_the_readme_fits_on_a_few_screens() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move details to docs/"
    )


@pytest.mark.parametrize("page", CHECKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading(page: Path) -> None:
    broken = []
    for target in relative_links(page):
        file_part, _, anchor = target.partition("#")
        destination = (page.parent / file_part).resolve() if file_part else page
        if not destination.exists():
            broken.append(f"{target}: no such file")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            broken.append(f"{target}: no heading with anchor #{anchor}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_docs_index_lists_every_doc() -> None:
    text = README.read_text()
    assert DOCS_INDEX_HEADING in text.splitlines(), f"README.md has no '{DOCS_INDEX_HEADING}'"
    section = text.split(DOCS_INDEX_HEADING + "\n", 1)[1].split("\n## ", 1)[0]
    listed = {(ROOT / link.partition("#")[0]).resolve() for link in _LINK.findall(section)}
    missing = [
        str(doc.relative_to(ROOT))
        for doc in sorted((ROOT / "docs").iterdir())
        if doc.is_file() and doc.resolve() not in listed
    ]
    assert not missing, f"README.md's docs index does not link {missing}"


def test_anchors_follow_githubs_rules(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# Who owns what\n\n## `containerMode: dind`, and JIT\n\n```sh\n# not a heading\n```\n"
        "## Who owns what\n"
    )
    assert anchors(page) == {"who-owns-what", "containermode-dind-and-jit", "who-owns-what-1"}
