"""benchmarks/ says what is current: scripts sit in one folder per kind, each result beside its
script carries its provenance (command, commit, machine, date), and benchmarks/MANIFEST.md, which
lists every result, is what benchmarks/manifest.py writes today. `make bench` lists every script."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


MANIFEST = load("manifest")
INDEX = load("index")


def test_the_committed_manifest_is_current():
    assert MANIFEST.MANIFEST.read_text() == MANIFEST.render(), (
        "benchmarks/MANIFEST.md is stale: run `.venv/bin/python benchmarks/manifest.py`"
    )


def test_every_result_json_carries_its_provenance():
    missing = MANIFEST.missing_provenance()
    assert not missing, (
        f"results without provenance (command, commit, machine, date): {missing}; add it with "
        "`.venv/bin/python benchmarks/manifest.py --stamp FILE --command ... --machine ...`"
    )


def test_every_result_lies_beside_a_script_or_a_named_tool():
    """benchmarks/<kind>/results/<name>/: <name> is a script of that kind, or one of the outputs no
    script of ours writes (`sacglam tune`'s grids, the fresh-clone times of `.ci/run`)."""
    tools = {"tune", "fresh_clone"}
    stray = sorted(
        str(p.relative_to(ROOT))
        for p in MANIFEST.result_files()
        if p.relative_to(BENCHMARKS).parts[2] not in tools
        and not (BENCHMARKS / p.relative_to(BENCHMARKS).parts[0] / f"{p.relative_to(BENCHMARKS).parts[2]}.py").exists()
    )
    assert not stray, stray


def test_scripts_live_in_their_kind_folders_and_make_bench_lists_every_one():
    loose = sorted(p.name for p in BENCHMARKS.glob("*.py") if p.name not in ("index.py", "manifest.py"))
    assert not loose, f"a benchmark script goes in one of {INDEX.KINDS}: {loose}"
    listed = {name for name, _ in INDEX.benchmarks()}
    scripts = {str(p.relative_to(ROOT)) for kind in INDEX.KINDS for p in (BENCHMARKS / kind).glob("*.py")}
    assert listed == scripts
    assert all(summary for _, summary in INDEX.benchmarks()), "every script's docstring states its claim"
    assert (
        set(MANIFEST.KINDS)
        == set(INDEX.KINDS)
        == {p.name for p in BENCHMARKS.iterdir() if p.is_dir() and p.name != "__pycache__"}
    )
