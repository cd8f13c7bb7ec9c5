"""The docs stay true: every ```python block of README.md and docs/*.md runs, every file path they
name exists, and nothing in the repository points at files outside it.

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
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
# Repository paths the docs name: configs, benchmarks, docs, package modules, deploy files.
# Links from docs/ reach them as ../<path>; a glob or a placeholder (`runs/cpu_*.yaml`) is not a path.
_REPO_PATH = re.compile(
    r"(?<![\w/.])(?:\.\./)?((?:tune_configs|benchmarks|docs|sacglam|deploy|tests)/[\w./-]*\w)(?![\w*<])"
)


def python_blocks(page: Path) -> list[str]:
    return [b for b in _PYTHON_BLOCK.findall(page.read_text()) if not b.lstrip().startswith("# not run:")]


PAGES_WITH_CODE = [p for p in PAGES if python_blocks(p)]


def test_the_docs_have_runnable_examples():
    assert len(PAGES_WITH_CODE) >= 3, [p.name for p in PAGES_WITH_CODE]


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=lambda p: p.name)
def test_every_python_example_runs(page):
    prelude = "import torch\ntorch.set_num_threads(1)\n"
    program = prelude + "\n".join(
        f"# --- block {i} of {page.name}\n" + textwrap.dedent(block) for i, block in enumerate(python_blocks(page))
    )
    result = subprocess.run(
        [sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, f"{page.name}: an example failed\n{result.stderr[-3000:]}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
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
    cite = re.compile(r'`docs/([\w-]+\.md)`,(?: section)? ((?:"[^"]+"(?:,| and)? ?)+)')
    checked = 0
    for source in (ROOT / "sacglam").rglob("*.py"):
        for page, quoted in cite.findall(source.read_text()):
            headings = set(re.findall(r"^#+ (.+)$", (ROOT / "docs" / page).read_text(), re.M))
            for heading in re.findall(r'"([^"]+)"', quoted):
                checked += 1
                assert heading in headings, f"{source.name} cites docs/{page} section {heading!r}, which is not there"
    assert checked >= 6, f"expected the environment modules to cite their sections, found {checked} citations"
