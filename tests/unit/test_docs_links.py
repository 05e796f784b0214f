"""The documentation is cited by paths in the repository, and every such path resolves.

`mkdocs build --strict` (make test) checks the links between the pages under docs/; these
tests check what it does not see: the README's links, and the pages and anchors that code,
tests and SQL cite (``docs/reference/contract.md#email-api``), and that nothing still cites
the contract or the design notes that lived outside the repository.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest
from markdown.extensions.toc import slugify
from services import REPO

FOLDERS = (
    "relay", "consumer", "intake", "campaigns", "feedback", "schemas", "sandbox", "mailbus",
    "client", "tests", "bench", "stack", "demo", "docs", "ops", "k8s",
)  # fmt: skip
TOP_LEVEL = ("README.md", "CHANGELOG.md", "Makefile", "pyproject.toml", "mkdocs.yml")
SUFFIXES = {".py", ".sql", ".md", ".toml", ".sh", ".yml", ".yaml", ".avsc", ".json"}
CITATION = re.compile(r"\bdocs/[\w./-]+\.md(?:#[\w-]+)?")
OUTSIDE = re.compile(r"\b(?:CONTRACT|ARCHITECTURE)(?:\.md| §)|\.\./shared/")
README_LINK = re.compile(r"\]\(([^)\s]+)\)")


@cache
def text_files() -> tuple[Path, ...]:
    """Each file once, by its real path (mailbus/relay is a link to relay/)."""
    found = {(REPO / name).resolve() for name in TOP_LEVEL if (REPO / name).exists()}
    for folder in FOLDERS:
        found |= {
            path.resolve()
            for path in (REPO / folder).rglob("*")
            if path.suffix in SUFFIXES and path.is_file()
        }
    return tuple(sorted(found))


def anchors(page: Path, slug: Callable[[str], str] | None = None) -> set[str]:
    """The ids of a Markdown page's headings, as mkdocs makes them (explicit ``{#id}`` too),
    or as ``slug`` makes them (:func:`github_slug`), and its ``<a id="...">`` anchors."""
    found, fence = set(), False
    for line in page.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        heading = re.match(r"^#{1,6} (.+?)\s*$", line)
        if not fence:
            found.update(re.findall(r'<a (?:id|name)="([\w-]+)"', line))
        if fence or not heading:
            continue
        title = heading.group(1)
        explicit = re.search(r"\{#([\w-]+)\}$", title)
        if explicit and slug is None:
            found.add(explicit.group(1))
            continue
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title).replace("`", "")
        found.add(slugify(title, "-") if slug is None else slug(title))
    return found


def github_slug(title: str) -> str:
    """GitHub's id for a heading (code marks and links already dropped): lower case,
    punctuation removed, each space a hyphen; a ``{#id}`` is shown, not used."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def problem(target: str) -> str | None:
    """Why a repository path (``docs/runbook.md#adding-partitions``) does not resolve."""
    path, _, anchor = target.partition("#")
    file = REPO / path
    if not file.exists():
        return f"{path} does not exist"
    if anchor and anchor not in anchors(file):
        return f"{path} has no anchor #{anchor}"
    return None


def citations() -> list[tuple[str, str]]:
    return sorted(
        {
            (str(path.relative_to(REPO)), target)
            for path in text_files()
            for target in CITATION.findall(path.read_text(errors="replace"))
        }
    )


def test_the_scan_reads_code_tests_and_docs() -> None:
    names = {str(path.relative_to(REPO)) for path in text_files()}
    assert {"consumer/core/outcome.py", "tests/unit/test_outcome.py", "README.md"} <= names
    assert "docs/reference/contract.md" in names
    assert len(citations()) >= 8


@pytest.mark.parametrize(("source", "target"), citations())
def test_cited_page_and_anchor_exist(source: str, target: str) -> None:
    assert problem(target) is None, f"{source} cites {target}: {problem(target)}"


def test_readme_links_resolve() -> None:
    links = [
        link
        for link in README_LINK.findall((REPO / "README.md").read_text())
        if not re.match(r"^[a-z]+:", link)
    ]
    assert len(links) >= 20
    links = [f"README.md{link}" if link.startswith("#") else link for link in links]
    broken = {link: problem(link) for link in links if problem(link)}
    assert broken == {}


def test_nothing_cites_the_notes_outside_the_repository() -> None:
    found = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path in text_files()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert found == []


def test_anchors_are_made_as_mkdocs_makes_them(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n## Outcome events out: `{prefix}.send.events`\n"
        "## 5. The email API {#email-api}\n```sh\n# not a heading\n```\n"
    )
    assert anchors(page) == {"title", "outcome-events-out-prefixsendevents", "email-api"}


def test_every_anchor_link_lands_on_github_too() -> None:
    """GitHub shows a heading's attr_list ``{#id}`` as text and ids the heading by its words,
    so an anchor a page links to is a heading's GitHub id or an ``<a id="...">``."""
    missing = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        for target, anchor in re.findall(r"\]\(([^)\s:]*?)#([\w-]+)\)", page.read_text()):
            linked = (page.parent / target).resolve() if target else page
            if linked.suffix == ".md" and anchor not in anchors(linked, github_slug):
                missing.append(f"{page.relative_to(REPO)}: {target}#{anchor}")
    assert missing == []


def test_github_ids() -> None:
    assert github_slug("2. Command line: mailbus {#cli}") == "2-command-line-mailbus-cli"
    assert github_slug("Kafka down (the runbook)") == "kafka-down-the-runbook"
