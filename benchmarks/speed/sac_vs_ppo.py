"""SAC-GLAM+HER against PPO-GLAM: where each one's wall time per env step goes.

Runs the two methods' trials of a form of `tune_configs/experiments/figure2.yaml` (`--form`,
default `cpu-full-64k`: full task, tiny model, batch 64 against PPO's 4 epochs; seed 0; one torch
thread) in-process, one after the other, for `--env-steps` env steps each with evaluation off.
From `--start` env steps on (after the language warm start and SAC's critic warm-up, so the
window is the run's steady state) it times every env step's phases: collection (environments, the inference forward), and in
the learner the encoding, the forwards (with gradients; without gradients under the target
weights, SAC's next states; without gradients under the online weights, PPO's pass over its
rollout), the backward, the optimizer step, and the rest (replay sampling, losses, Polyak
averaging, metrics). The SAC - PPO column is the extra work SAC does per env step.

    .venv/bin/python benchmarks/speed/sac_vs_ppo.py [--env-steps 12288] [--start 4096] [--form cpu-full-64k]

Prints a table and writes benchmarks/speed/results/sac_vs_ppo/sac_vs_ppo.json. The timers are wrappers around the
project's methods (nothing is sampled); they add about a microsecond per call.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import tyro

PHASES = (
    "collection",
    "learner: encoding",
    "learner: forward with gradients",
    "learner: forward, target weights, no gradients",
    "learner: forward, online weights, no gradients",
    "learner: backward",
    "learner: optimizer step",
    "learner: the rest",
    "driver: the rest",
)


@dataclass(frozen=True)
class Args:
    env_steps: int = 12_288
    """Env steps each method runs."""
    start: int = 4_096
    """Env steps before the timed window opens."""
    seed: int = 0
    form: str = "cpu-full-64k"
    """The form of tune_configs/experiments/figure2.yaml whose trials run (e.g. `cpu-full-64k-32x4`);
    it needs `sac-her` and `ppo` variants with the chosen seed."""
    output: Path = Path("benchmarks/speed/results/sac_vs_ppo/sac_vs_ppo.json")


class PhaseClock:
    """Exclusive wall time per phase inside the timed window. Only the outermost timed call of a
    region counts (an inference forward inside collection is collection's)."""

    def __init__(self, start: int):
        self.start, self.on, self.began, self.first_step = start, False, 0.0, 0
        self.region: str | None = None  # "collection" or "learner" while the driver is in one
        self.inner = False  # inside a timed call of the learner
        self.target_weights = False  # inside SAC's swapped_parameters
        self.seconds: Counter[str] = Counter()

    def open_if_due(self, env_steps: int) -> None:
        if not self.on and env_steps >= self.start:
            self.on, self.began, self.first_step = True, time.perf_counter(), env_steps

    def region_call(self, region: str, call, driver, *args, **kwargs):
        if region == "collection":  # the window opens on a collection, so it holds no update of
            self.open_if_due(driver.c.env_steps)  # steps before it (PPO trains on its last rollout)
        if not self.on or self.region is not None:
            return call(driver, *args, **kwargs)
        self.region, began = region, time.perf_counter()
        try:
            return call(driver, *args, **kwargs)
        finally:
            self.seconds[region] += time.perf_counter() - began
            self.region = None

    def learner_call(self, label, call, *args, **kwargs):
        if not self.on or self.region != "learner" or self.inner:
            return call(*args, **kwargs)
        self.inner, began = True, time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            self.seconds[label() if callable(label) else label] += time.perf_counter() - began
            self.inner = False


def instrument(clock: PhaseClock) -> None:
    """Wrap the methods whose time the table splits (process-wide, for this script only)."""
    import torch

    import sacglam.learner.sac as sac_module
    from sacglam.models.agent import GLAMAgent
    from sacglam.pipeline.driver import PipelineDriver

    for name, region in (("train", "learner"), ("collect", "collection")):
        original = getattr(PipelineDriver, name)
        setattr(
            PipelineDriver,
            name,
            lambda driver, *a, _call=original, _region=region, **k: clock.region_call(_region, _call, driver, *a, **k),
        )

    def forward_label() -> str:
        if torch.is_grad_enabled():
            return "learner: forward with gradients"
        weights = "target" if clock.target_weights else "online"
        return f"learner: forward, {weights} weights, no gradients"

    for cls, name, label in (
        (GLAMAgent, "encode", "learner: encoding"),
        (GLAMAgent, "forward", forward_label),
        (GLAMAgent, "candidate_scores", forward_label),  # SAC's critic warm-up calls it directly
        (torch.Tensor, "backward", "learner: backward"),
        (torch.optim.Adam, "step", "learner: optimizer step"),
    ):
        original = getattr(cls, name)
        setattr(cls, name, lambda *a, _call=original, _label=label, **k: clock.learner_call(_label, _call, *a, **k))

    swap = sac_module.swapped_parameters

    @contextmanager
    def flagged_swap(parameters, values):
        clock.target_weights = True
        try:
            with swap(parameters, values):
                yield
        finally:
            clock.target_weights = False

    sac_module.swapped_parameters = flagged_swap  # type: ignore[assignment]


def run_one(variant: str, args: Args) -> dict:
    """One method's run in a fresh process (the wrappers stay in that process)."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        return pool.apply(_run, (variant, args))


def _run(variant: str, args: Args) -> dict:
    import tempfile
    import warnings

    import torch

    from sacglam.experiments.spec import load_experiment
    from sacglam.pipeline.run import run_pipeline

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    form = load_experiment("tune_configs/experiments/figure2.yaml", args.form)
    trial = next(t for t in form.trials if t.coordinates == {"variant": variant, "seed": args.seed})
    clock = PhaseClock(args.start)
    instrument(clock)
    with tempfile.TemporaryDirectory() as directory:
        cfg = replace(
            trial.train_config(),
            total_env_steps=args.env_steps,
            eval_every=10**9,
            eval_episodes=0,
            output_dir=Path(directory) / "run",
            progress=False,
        )
        run_pipeline(cfg, announce=lambda _: None)
    total = time.perf_counter() - clock.began
    steps = args.env_steps - clock.first_step
    learner_inner = sum(v for k, v in clock.seconds.items() if k.startswith("learner: "))
    phases = dict(clock.seconds)
    phases["learner: the rest"] = phases.pop("learner", 0.0) - learner_inner
    phases["driver: the rest"] = total - phases["collection"] - learner_inner - phases["learner: the rest"]
    return {
        "env_steps_timed": steps,
        "seconds": total,
        "ms_per_env_step": {phase: 1e3 * phases.get(phase, 0.0) / steps for phase in PHASES},
        "total_ms_per_env_step": 1e3 * total / steps,
    }


def main(args: Args) -> None:
    if not args.start < args.env_steps:
        raise SystemExit(f"--start ({args.start}) must be below --env-steps ({args.env_steps})")
    results = {variant: run_one(variant, args) for variant in ("sac-her", "ppo")}
    sac, ppo = (results[v]["ms_per_env_step"] for v in ("sac-her", "ppo"))
    print(f"ms per env step, env steps {args.start:,} to {args.env_steps:,} ({args.form} settings, seed {args.seed})")
    print(f"{'phase':48s} {'SAC+HER':>8s} {'PPO':>8s} {'SAC-PPO':>8s}")
    for phase in PHASES:
        print(f"{phase:48s} {sac[phase]:8.3f} {ppo[phase]:8.3f} {sac[phase] - ppo[phase]:+8.3f}")
    totals = {v: results[v]["total_ms_per_env_step"] for v in results}
    ratio = totals["sac-her"] / totals["ppo"]
    print(f"{'total':48s} {totals['sac-her']:8.3f} {totals['ppo']:8.3f} {totals['sac-her'] - totals['ppo']:+8.3f}")
    print(f"SAC+HER / PPO-GLAM wall time per env step: {ratio:.3f}x")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(
        json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "ratio": ratio, **results}, indent=2) + "\n"
    )
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main(tyro.cli(Args))
