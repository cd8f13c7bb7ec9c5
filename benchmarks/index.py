"""Every benchmark of `benchmarks/`, by kind, with the claim it measures and how to run it (`make bench`).

Scripts live in one folder per kind (`speed/`, `studies/`, `suite/`, `gpu/`); each prints a table
and writes its JSON (and plots) under `benchmarks/<kind>/results/<script>/`.
`benchmarks/MANIFEST.md` lists every result file with the command that made it, its commit,
machine and date, and the docs pages that quote it. This index only lists the scripts: it reads
each one's docstring, so a new script shows up here by existing.
"""

from __future__ import annotations

import ast
from pathlib import Path

HERE = Path(__file__).resolve().parent
KINDS = {
    "speed": "speed: how fast each part runs (environments, replay, scoring, learner, pipeline)",
    "studies": "studies: learning results (figure 2, ablations, other environments, SmolLM2)",
    "suite": "suite: tools for the test suite (its margins, kernel sets, cost) and end-to-end checks",
    "gpu": "gpu: scripts for a GPU machine without internet access, rehearsed on the CPU by the tests",
}


def benchmarks() -> list[tuple[str, str]]:
    """(script path from the repository root, first paragraph of its docstring), for every script."""
    out = []
    for kind in KINDS:
        for path in sorted((HERE / kind).glob("*.py")):
            doc = ast.get_docstring(ast.parse(path.read_text())) or ""
            out.append((f"benchmarks/{kind}/{path.name}", " ".join(doc.split("\n\n")[0].split())))
    return out


def main() -> None:
    print("Benchmarks (run one with `.venv/bin/python <script> --help` for its options):")
    kind = None
    for name, summary in benchmarks():
        if name.split("/")[1] != kind:
            kind = name.split("/")[1]
            print(f"\n{KINDS[kind]}\n")
        print(f"  {name}\n      {summary}\n")


if __name__ == "__main__":
    main()
