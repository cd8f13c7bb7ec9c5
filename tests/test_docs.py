"""The docs stay true: every ```python block of README.md and docs/ runs, every file path they
name and every link between pages exists (anchors included), no page outgrows 400 lines, every
results page opens with its summary, and nothing in the repository points at files outside it.

Python blocks of one page run in order in one fresh interpreter (a later block may use an earlier
block's names), with the repository root as the working directory and one torch thread. A block
that must not run (it needs a GPU or minutes of training) starts with `# not run: <reason>`.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
DOCS = [p for p in PAGES if p.parent != ROOT]
_PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
# Repository paths the docs name: configs, benchmarks, docs, package modules, deploy files.
# Links from docs/ reach them as ../<path> (../../<path> from a subfolder); a glob or a placeholder
# (`runs/cpu_*.yaml`) is not a path.
_REPO_PATH = re.compile(
    r"(?<![\w/.])(?:\.\./)*((?:tune_configs|benchmarks|docs|sacglam|deploy|tests)/[\w./-]*\w)(?![\w*<])"
)
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_FENCED = re.compile(r"^```.*?^```", re.S | re.M)
_CODE = re.compile(_FENCED.pattern + r"|`[^`\n]*`", re.S | re.M)


def python_blocks(page: Path) -> list[str]:
    return [b for b in _PYTHON_BLOCK.findall(page.read_text()) if not b.lstrip().startswith("# not run:")]


PAGES_WITH_CODE = [p for p in PAGES if python_blocks(p)]


def test_the_docs_have_runnable_examples():
    assert len(PAGES_WITH_CODE) >= 3, [p.name for p in PAGES_WITH_CODE]


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=page_id)
def test_every_python_example_runs(page):
    prelude = "import torch\ntorch.set_num_threads(1)\n"
    program = prelude + "\n".join(
        f"# --- block {i} of {page.name}\n" + textwrap.dedent(block) for i, block in enumerate(python_blocks(page))
    )
    result = subprocess.run(
        [sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, f"{page.name}: an example failed\n{result.stderr[-3000:]}"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_path_the_docs_name_exists(page):
    named = {p.rstrip(".") for p in _REPO_PATH.findall(page.read_text())}
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing, f"{page.name} names paths that do not exist: {missing}"


def test_nothing_in_the_repository_points_outside_it():
    """The repository stands on its own: no reference to the private folder of inputs beside it
    (`shared`, followed by a slash). The pattern is built so this file does not match itself."""
    outside = re.compile("shared" + re.escape("/") + "|" + re.escape("../") + "shared")
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    offenders = [
        f
        for f in tracked
        if f.endswith((".py", ".md", ".yaml", ".toml", ".cfg", ".txt")) or f == "Makefile"
        if outside.search((ROOT / f).read_text(errors="ignore"))
    ]
    assert not offenders, offenders


def test_code_cites_sections_that_exist():
    """Docstrings cite the spec as `docs/<page>.md`, "<Heading>": the heading must be on that page."""
    cite = re.compile(r'`docs/([\w/-]+\.md)`,(?: section)? ((?:"[^"]+"(?:,| and)? ?)+)')
    checked = 0
    for source in (ROOT / "sacglam").rglob("*.py"):
        for page, quoted in cite.findall(source.read_text()):
            headings = set(re.findall(r"^#+ (.+)$", (ROOT / "docs" / page).read_text(), re.M))
            for heading in re.findall(r'"([^"]+)"', quoted):
                checked += 1
                assert heading in headings, f"{source.name} cites docs/{page} section {heading!r}, which is not there"
    assert checked >= 6, f"expected the environment modules to cite their sections, found {checked} citations"


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, spaces to hyphens, other punctuation dropped."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = _FENCED.sub("", page.read_text()) if page.suffix == ".md" else ""
    return {slug(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_link_between_pages_reaches_a_file_and_heading(page):
    """A relative link names a file that exists; its #anchor, a heading on that page."""
    broken = []
    for target in _LINK.findall(_CODE.sub("", page.read_text())):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(target)
    assert not broken, f"{page_id(page)} links to what is not there: {broken}"


@pytest.mark.parametrize("page", DOCS, ids=page_id)
def test_no_docs_page_is_longer_than_400_lines(page):
    assert len(page.read_text().splitlines()) <= 400, f"{page_id(page)}: split it by what its reader came for"


def test_every_docs_page_is_reachable_from_the_index():
    """docs/index.md, then the pages it links, and theirs: no page is an orphan."""
    seen, todo = set(), [(ROOT / "docs" / "index.md").resolve()]
    while todo:
        page = todo.pop()
        if page in seen or page.suffix != ".md" or not page.exists():
            continue
        seen.add(page)
        todo += [(page.parent / t.partition("#")[0]).resolve() for t in _LINK.findall(page.read_text())]
    orphans = [page_id(p) for p in DOCS if p.resolve() not in seen]
    assert not orphans, f"not reachable from docs/index.md: {orphans}"


SUMMARY = ("Question", "Setting", "Answer", "Figure", "Command")


@pytest.mark.parametrize("page", [p for p in DOCS if p.parent.name == "results" and p.name != "index.md"], ids=page_id)
def test_every_results_page_opens_with_its_summary(page):
    """Below the title, before anything else: the question, the setting, the answer, the figure (or
    table) that shows it and the command that reproduces it, one bold label each."""
    body = page.read_text().split("\n", 1)[1].lstrip("\n")
    items = re.split(r"\n(?=- )", body.split("\n\n", 1)[0])  # the first paragraph's list items
    labels = [re.match(r"- \*\*(\w+)\.\*\*", item) for item in items]
    assert [m.group(1) if m else None for m in labels] == list(SUMMARY), (
        f"{page_id(page)} must open with: " + ", ".join(f"- **{s}.**" for s in SUMMARY)
    )


def test_no_page_tells_how_this_projects_machines_were_obtained():
    """A user has their own machine: nothing in README or docs/ about lent machines, upload limits
    or a session's device time."""
    borrowed = re.compile(r"\blent\b|upload limit|device time|budget_left", re.I)
    offenders = [page_id(p) for p in PAGES if borrowed.search(p.read_text())]
    assert not offenders, offenders
