"""Every benchmark of `benchmarks/`, with the claim it measures and how to run it (`make bench`).

Each script prints a table and writes its JSON (and plots) under `benchmarks/results/`; the
figures quoted in the docs carry the command that produced them. This index only lists them: it
reads each script's docstring, so a new script shows up here by existing.
"""

from __future__ import annotations

import ast
from pathlib import Path

HERE = Path(__file__).resolve().parent


def benchmarks() -> list[tuple[str, str]]:
    """(script, first paragraph of its docstring), for every benchmark script."""
    out = []
    for path in sorted(HERE.glob("*.py")):
        if path.name == Path(__file__).name:
            continue
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        out.append((path.name, " ".join(doc.split("\n\n")[0].split())))
    return out


def main() -> None:
    print("Benchmarks (run one with `.venv/bin/python benchmarks/<script> --help` for its options):\n")
    for name, summary in benchmarks():
        print(f"  benchmarks/{name}\n      {summary}\n")


if __name__ == "__main__":
    main()
