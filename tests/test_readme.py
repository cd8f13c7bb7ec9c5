"""The README quotes figures only from committed results: each success rate, time and ratio in it
is the rounded value of a field of a result JSON, and the README names that file. A re-run whose
JSON changes a quoted figure fails here until the README follows; a figure added to the README
without a source fails too.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DEMO = "benchmarks/suite/results/fresh_clone/make_demo.json"
SUITE = "benchmarks/suite/results/fresh_clone/make_test.json"
FIGURE2 = "benchmarks/studies/results/figure2/cpu-full-64k/figure2.json"
SMOLLM2 = "benchmarks/gpu/results/smollm2_gpu/smollm2.json"


def minutes(seconds: float) -> str:
    return f"about {round(seconds / 60)} min"


def before_after(before: float, after: float) -> str:
    return f"{before:.3f} -> {after:.3f}"


# (the text as the README has it, its JSON, the fields (each a key path), how they are written)
FIGURES = [
    ("about 8 min", DEMO, [["wall_seconds"]], minutes),
    ("about 12 min", SUITE, [["make_test", "wall_seconds"]], minutes),
    *[
        (
            None,
            DEMO,
            [["success_before", f"simple-{goals}/{mode}/all"], ["success_after", f"simple-{goals}/{mode}/all"]],
            before_after,
        )
        for goals in ("train", "test")
        for mode in ("greedy", "sampled")
    ],
    ("| 0.56 |", FIGURE2, [["methods", "sac-her", "final_training_success_mean"]], "| {:.2f} |".format),
    ("| 0.13 |", FIGURE2, [["methods", "ppo", "final_training_success_mean"]], "| {:.2f} |".format),
    ("8.96 ms", FIGURE2, [["methods", "sac-her", "seconds_per_env_step_mean"]], lambda s: f"{s * 1000:.2f} ms"),
    ("7.28 ms", FIGURE2, [["methods", "ppo", "seconds_per_env_step_mean"]], lambda s: f"{s * 1000:.2f} ms"),
    ("1.23x", FIGURE2, [["checks", "wall_time_per_env_step_ratio_sac_her_to_ppo"]], "{:.2f}x".format),
    (
        "to 0.72 on train goals",
        SMOLLM2,
        [["summary", "sac-her", "simple-train/greedy", "mean"]],
        "to {:.2f} on train goals".format,
    ),
    (
        "and 0.23 on held-out",
        SMOLLM2,
        [["summary", "sac-her", "simple-test/greedy", "mean"]],
        "and {:.2f} on held-out".format,
    ),
    (
        "(targets 0.8 and 0.5",
        SMOLLM2,
        [["target", "simple-train"], ["target", "simple-test"]],
        "(targets {} and {}".format,
    ),
    (
        "PPO-GLAM to 0.60 and 0.26",
        SMOLLM2,
        [["summary", "ppo", "simple-train/greedy", "mean"], ["summary", "ppo", "simple-test/greedy", "mean"]],
        "PPO-GLAM to {:.2f} and {:.2f}".format,
    ),
]
# What counts as a quoted figure: a success rate, a ratio, a time.
_FIGURE = re.compile(
    r"(?<![\w.])(?:[01]\.\d+|\d+(?:\.\d+)?x|\d+(?:\.\d+)? ms|about \d+ min|\d+ min(?: \d+ s)?|\d+ s)(?![\w.])"
)
_COMMANDS = re.compile(r"^```bash\n.*?^```", re.S | re.M)


def field(path: str, keys: list[str]):
    value = json.loads((ROOT / path).read_text())
    for key in keys:
        value = value[key]
    return value


def rendered(path, keys, write) -> str:
    return write(*(field(path, k) for k in keys))


def test_every_figure_the_readme_quotes_is_its_json_field_rounded():
    stale = []
    for text, path, keys, write in FIGURES:
        expected = rendered(path, keys, write)
        if text is not None and text != expected:
            stale.append(f"the table in tests/test_readme.py has {text!r}, {path} gives {expected!r}")
        if expected not in README:
            stale.append(f"README.md should say {expected!r} ({path}: {keys})")
    assert not stale, "\n".join(stale)


def test_the_readme_names_the_file_of_every_figure():
    missing = sorted({path for _, path, _, _ in FIGURES if path not in README})
    assert not missing, f"README.md quotes figures from files it does not name: {missing}"


def test_every_figure_in_the_readme_has_a_source():
    """A success rate, ratio or time outside the commands is one of FIGURES (add it there)."""
    text = _COMMANDS.sub("", README)
    covered = [
        (m.start(), m.end())
        for expected in {rendered(p, k, w) for _, p, k, w in FIGURES}
        for m in re.finditer(re.escape(expected), text)
    ]
    loose = [
        m.group(0)
        for m in _FIGURE.finditer(text)
        if not any(start <= m.start() and m.end() <= end for start, end in covered)
    ]
    assert not loose, f"README.md quotes figures with no source in tests/test_readme.py: {loose}"
