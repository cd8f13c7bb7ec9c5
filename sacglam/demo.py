"""The main job (`make demo`, `sacglam demo`): the system doing what it exists for, in about ten
minutes on a 2-core CPU, through the Ray actor-learner pipeline.

Phase 1 (`learning`): SAC-GLAM+HER learns the simplified Playground-Text task with the tiny model
(language warm start, then RL), evaluated on the train goals and the held-out goals before, during
and after training. Phase 2 (`smollm2`): the embedded SmolLM2-135M-Instruct (LoRA) through the same
pipeline for a few hundred steps: rollouts through the inference actor, HER replay, LoRA updates
and weight broadcasts. Two CPU cores allow it only a handful of updates (several seconds each), so
that phase shows the real model running through the system, not learning.

Both phases share one Ray session (one dashboard); each writes its own run directory and
report, and the demo writes `report.md` over both.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from sacglam.config import TrainConfig
from sacglam.config_io import load_yaml_config
from sacglam.errors import UserInputError
from sacglam.report import report_lines

# The repository's run configs (the package sits next to tune_configs/ in a checkout), so the demo
# runs from any directory.
_CONFIGS = Path(__file__).resolve().parents[1] / "tune_configs" / "runs"
DEFAULT_PHASES = (_CONFIGS / "demo_learning.yaml", _CONFIGS / "demo_smollm2.yaml")

INTRO = """The main job: SAC-GLAM+HER through the Ray actor-learner pipeline (rollout workers, an
inference actor, the replay actor, a learner), in two phases.

1. **learning**: the tiny model (2-layer Llama, random weights, a language warm start on
   uniform-random transcripts) learns the simplified Playground-Text task (3 objects, 182 single
   goals, 8 steps). Success is measured on the train goals and on held-out goals it never trains
   on, with the policy sampling and greedy, on the same fixed episodes at every evaluation.
2. **smollm2**: the embedded SmolLM2-135M-Instruct with LoRA through the same pipeline. On two CPU
   cores an update takes several seconds, so this phase runs a few updates to show the real model
   going through every component; learning the task with it takes a GPU
   (`tune_configs/runs/cluster_gpu_sac_her.yaml`).
"""


@dataclass(frozen=True)
class DemoArgs:
    """Run the main job: each phase's training config through the pipeline, then one report."""

    phases: tuple[Path, ...] = DEFAULT_PHASES
    """Training configs run one after the other; each phase is named after its file (`demo_` dropped)."""
    output_dir: Path = Path("runs/demo")
    """Each phase writes <output_dir>/<phase>/; the demo's report is <output_dir>/report.md."""
    address: str | None = None
    """Ray cluster to join; None starts a local one (shared by the phases)."""


class DemoDirectoryError(UserInputError):
    """The demo's output directory holds an earlier demo."""


def phase_configs(args: DemoArgs) -> list[tuple[str, TrainConfig]]:
    """(name, config) per phase: every file loaded, every model found and the output directory
    checked before anything runs, so no phase fails after the ones before it took minutes."""
    if args.output_dir.exists() and any(args.output_dir.iterdir()):
        raise DemoDirectoryError(
            f"{args.output_dir} holds an earlier demo: remove it (`make demo` does) or pass another --output-dir"
        )
    from sacglam.models.loading import check_model  # torch and transformers: only when a demo runs

    phases = []
    for path in args.phases:
        cfg = load_yaml_config(TrainConfig, path)
        check_model(cfg.agent.model)
        name = path.stem.removeprefix("demo_")
        phases.append((name, replace(cfg, output_dir=str(args.output_dir / name), address=args.address or cfg.address)))
    return phases


def run_demo(args: DemoArgs, train: Callable[[TrainConfig], object]) -> Path:
    """Run every phase with `train` (the CLI's: it prints each phase's before -> after), then write
    `<output_dir>/report.md` with each phase's table, figures and curves."""
    phases = phase_configs(args)
    seconds: dict[str, float] = {}
    try:
        for i, (name, cfg) in enumerate(phases, 1):
            print(
                f"\n== phase {i}/{len(phases)}: {name} ({cfg.algo} on {cfg.agent.model}, {cfg.total_env_steps} env steps)"
            )
            start = time.perf_counter()
            train(cfg)
            seconds[name] = time.perf_counter() - start
    finally:  # the phases that finished are reported even when a later one fails
        report = write_demo_report(args.output_dir, [(n, c) for n, c in phases if n in seconds], seconds)
    print(f"\ndemo report: {report} (phases: {', '.join(f'{n} {s / 60:.1f} min' for n, s in seconds.items())})")
    return report


def write_demo_report(directory: Path, phases: list[tuple[str, TrainConfig]], seconds: dict[str, float]) -> Path:
    """`<directory>/report.md`: the intro, then each finished phase's table, figures and curves."""
    lines = ["# sacglam demo", "", INTRO]
    for name, cfg in phases:
        lines += [f"## {name} ({seconds[name] / 60:.1f} min)", ""]
        lines += report_lines(Path(cfg.output_dir), image=f"{name}/curves.png")
        if (Path(cfg.output_dir) / "transcripts" / "transcripts.html").exists():  # `sacglam train` recorded them
            lines += [
                "Transcripts of the final evaluation's first episodes (greedy), step by step: "
                f"[page]({name}/transcripts/transcripts.html), [text]({name}/transcripts/transcripts.txt).",
                "",
            ]
    directory.mkdir(parents=True, exist_ok=True)
    report = directory / "report.md"
    report.write_text("\n".join(lines))
    return report
