"""GPU check: the CUDA + bfloat16 path on a SmolLM2-architecture model with random weights, in one run.

No pretrained weights need to reach the GPU machine (which may have no internet access): the model
has SmolLM2-135M's architecture and tokenizer and random weights, and speed and correctness of the
path do not depend on the weights. Two steps:

    .venv/bin/python benchmarks/gpu/gpu_check.py prepare            # here: config + tokenizer, no weights -> .gpu/
    python benchmarks/gpu/gpu_check.py run --model-dir .gpu/smollm2-arch   # on the GPU machine (under 8 min on one H100)

`run` measures, on the agent's default GPU settings (`dtype: auto` = bfloat16 base, float32 LoRA,
heads and losses):
- bf16 matmul rate (8192^3) of the card, the reference for the fractions below;
- scoring throughput: inference forwards of full-task states (the shared-prefix path), states/s
  and TFLOP/s (torch's FlopCounterMode on the ops run) as a fraction of the measured matmul rate,
  eager and with `agent.compile`;
- bf16 against fp32: max and mean |log pi| gap over the same states;
- the SAC-GLAM update (batch `--sac-batch`, HER replay of full-task episodes) with LoRA on every
  block and on the top 4 (`agent.lora_layers`), eager and compiled;
- a PPO-GLAM update (2 epochs) on one rollout, LoRA on every block and on the top 4 (whose frozen
  trunk runs once for both epochs): seconds, and the first gradient step's largest |log ratio| and
  clip fraction over the rollout's own rows, which must be exactly 0 in bfloat16 too;
- the local runner end to end: a short SAC-GLAM+HER and a PPO-GLAM run through `run_pipeline`.

Each part runs on its own: a part that fails is recorded with its error and the others go on.
Prints a table and writes benchmarks/gpu/results/gpu_check/gpu_check.json (or `--output`). A test runs it on
the CPU with a 2-block model (`--layers 2 --hidden 64 ...`).
"""

from __future__ import annotations

import json
import platform
import statistics
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import tyro

PREPARED = Path(".gpu/smollm2-arch")
TOKENIZER_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


@dataclass(frozen=True)
class Prepare:
    """Write SmolLM2-135M's config and tokenizer (no weights) where `run` reads them."""

    out: Path = PREPARED


@dataclass(frozen=True)
class Run:
    """Measure the GPU path (see the module docstring)."""

    model_dir: Path = PREPARED
    """A directory with a causal LM's config.json and tokenizer (from `prepare`); weights are random."""
    device: str = "cuda"
    dtype: str = "auto"
    """The agent's `dtype` (auto: bfloat16 on CUDA with LoRA)."""
    layers: int | None = None
    """Override the config's block count (the CPU test uses 2)."""
    hidden: int | None = None
    """Override the hidden size (heads and MLP width scale with it; the CPU test uses 64)."""
    scoring_states: tuple[int, ...] = (64, 256)
    """Batch sizes of the scoring throughput."""
    sac_batch: int = 256
    top_layers: int = 4
    """`agent.lora_layers` of the SAC update timed against LoRA on every block."""
    ppo_rollout: int = 512
    ppo_minibatch: int = 256
    repeats: int = 5
    """Timed repeats of each measurement (median), after warm-up calls."""
    compile: bool = True
    """Also time scoring and the SAC update with `agent.compile`."""
    pipeline_env_steps: int = 1024
    """Env steps of each local-runner run (0: skip them)."""
    eval_episodes: int = 32
    """Evaluation episodes per goal set of each local-runner run."""
    output: Path = Path("benchmarks/gpu/results/gpu_check/gpu_check.json")


# ---------------------------------------------------------------------------- preparation


def prepare(args: Prepare) -> None:
    """Copy the embedded SmolLM2's config and tokenizer files (converting the GGUF once if needed)."""
    import shutil

    from sacglam.models.loading import embedded_model_dir

    source = embedded_model_dir("smollm2-135m")
    args.out.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if (source / name).exists():
            shutil.copy(source / name, args.out / name)
    size = sum(f.stat().st_size for f in args.out.iterdir())
    print(f"wrote {args.out} ({size / 1e6:.1f} MB: config and tokenizer, no weights)")


def random_model(args: Run, out: Path) -> str:
    """A model directory with `args.model_dir`'s config (blocks and width overridden if asked) and
    tokenizer, and seeded random weights; returns its path."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(args.model_dir)
    if args.layers is not None:
        config.num_hidden_layers = args.layers
    if args.hidden is not None:
        heads = max(1, args.hidden // 64)
        config.hidden_size, config.intermediate_size = args.hidden, args.hidden * 8 // 3
        config.num_attention_heads, config.num_key_value_heads, config.head_dim = heads, heads, args.hidden // heads
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(args.model_dir).save_pretrained(out)
    return str(out)


# ---------------------------------------------------------------------------- measurements


def synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn: Callable[[], object], device: str, repeats: int, warmup: int = 1) -> float:
    """Median seconds of `fn` over `repeats` calls after `warmup` calls (device work included)."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        synchronize(device)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def matmul_rate(device: str, dtype) -> float:
    """TFLOP/s of a square bf16 matmul (8192^3 on a GPU, 256^3 on a CPU)."""
    import torch

    n = 8192 if device.startswith("cuda") else 256  # a CPU may emulate bfloat16: seconds per 1024^3
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    seconds = timed(lambda: a @ b, device, repeats=10, warmup=3)
    return 2 * n**3 / seconds / 1e12


def counted_flops(fn: Callable[[], object]) -> float:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return float(counter.get_total_flops())


def full_task_states(n: int) -> tuple[list[str], list[list[str]]]:
    """n full-task states (6 objects) after 5 uniform-random steps: varied candidate counts."""
    import random

    from sacglam.envs import PlaygroundTextVector

    vec = PlaygroundTextVector(n, n_objects=6, goals="train", max_steps=30)
    obs, info = vec.reset(seed=0)
    rng = random.Random(0)
    for _ in range(5):
        obs, *_, info = vec.step([rng.choice(c) for c in info["candidates"]])
    return list(obs), [list(c) for c in info["candidates"]]


def agent_config(model: str, args: Run, **overrides):
    from sacglam.config import AgentConfig

    base = dict(
        model=model,
        lora_r=16,
        lora_alpha=32,
        critic="action",
        critic_width=1024,
        prompt_template="candidates",
        device=args.device,
        dtype=args.dtype,
    )
    return AgentConfig(**(base | overrides))  # type: ignore[arg-type]


def scoring(model: str, args: Run, peak: float, compiled: bool) -> list[dict]:
    import torch

    from sacglam.models import GLAMAgent

    rows = []
    if True:  # one agent for every batch size
        torch.manual_seed(0)
        agent = GLAMAgent(agent_config(model, args, critic="none", compile=compiled)).eval()
        for n in args.scoring_states:
            observations, candidates = full_task_states(n)
            batch = agent.encode(observations, candidates)

            def forward(agent=agent, batch=batch):
                with torch.inference_mode():
                    return agent(batch, with_critic=False)

            seconds = timed(forward, args.device, args.repeats, warmup=3 if compiled else 1)
            flops = counted_flops(forward)
            rows.append(
                {
                    "compiled": compiled,
                    "states": n,
                    "tokens": int(batch.input_ids.numel()),
                    "seconds": seconds,
                    "states_per_s": n / seconds,
                    "tflop_per_s": flops / seconds / 1e12,
                    "fraction_of_matmul_rate": flops / seconds / 1e12 / peak,
                }
            )
        del agent
    return rows


def dtype_gap(model: str, args: Run) -> dict:
    """|log pi| of the configured dtype against float32 on the same states and weights."""
    import torch

    from sacglam.models import GLAMAgent

    observations, candidates = full_task_states(32)
    outs, resolved = {}, {}
    for dtype in (args.dtype, "float32"):
        torch.manual_seed(0)
        agent = GLAMAgent(agent_config(model, args, critic="none", dtype=dtype)).eval()
        with torch.inference_mode():
            outs[dtype] = agent(agent.encode(observations, candidates), with_critic=False)
        resolved[dtype] = agent.config.resolved_dtype
        del agent
    low, full = outs[args.dtype], outs["float32"]
    gap = (low.log_pi - full.log_pi)[full.mask].abs()
    return {
        "dtype": resolved[args.dtype],
        "max_abs_log_pi_gap": float(gap.max()),
        "mean_abs_log_pi_gap": float(gap.mean()),
    }


def replay_batches(args: Run, count: int):
    from sacglam.config import EnvConfig
    from sacglam.replay_actor.buffer import ReplayBuffer
    from sacglam.rollout_workers.worker import RolloutWorker

    env = EnvConfig.variant("full")
    buffer = ReplayBuffer(100_000, 0.99, her=True, prior_goal_set=env.goals, seed=0)
    worker = RolloutWorker(env, 32, seed=0)
    while buffer.env_transitions < 4 * args.sac_batch:
        for episode in worker.collect(env.max_steps, None).episodes:
            buffer.add(episode)
    return [buffer.sample(args.sac_batch, 3, "ratio") for _ in range(count)]


def sac_updates(model: str, args: Run, compiled: bool) -> list[dict]:
    import torch

    from sacglam.config import SACConfig
    from sacglam.learner.sac import SACLearner
    from sacglam.models import GLAMAgent

    batches = replay_batches(args, args.repeats + 2)
    rows = []
    if True:  # LoRA on every block, then on the top blocks only
        for layers in (None, args.top_layers):
            if args.device.startswith("cuda"):
                torch.cuda.reset_peak_memory_stats()
            torch.manual_seed(0)
            agent = GLAMAgent(agent_config(model, args, lora_layers=layers, compile=compiled)).eval()
            learner = SACLearner(agent, SACConfig.with_her(batch_size=args.sac_batch, critic_warmup_updates=0))
            for batch in batches[:2]:  # warm-up (and compilation)
                learner.update(batch)
            synchronize(args.device)
            seconds = []
            for batch in batches[2:]:
                start = time.perf_counter()
                metrics = learner.update(batch)
                synchronize(args.device)
                seconds.append(time.perf_counter() - start)
            rows.append(
                {
                    "compiled": compiled,
                    "lora_layers": layers or "all",
                    "batch_size": args.sac_batch,
                    "seconds_per_update": statistics.median(seconds),
                    "gradient_samples_per_s": args.sac_batch / statistics.median(seconds),
                    "finite": all(v == v for v in metrics.values()),
                    "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30
                    if args.device.startswith("cuda")
                    else None,
                }
            )
            del agent, learner
    return rows


def ppo_update(model: str, args: Run) -> list[dict]:
    """A PPO update (2 epochs) on a rollout of random-play episodes, with LoRA on every block and on
    the top blocks (whose frozen trunk then runs once for both epochs): its time and the first
    step's ratio."""
    import numpy as np
    import torch

    from sacglam.config import EnvConfig, PPOConfig
    from sacglam.learner.ppo import PPOLearner
    from sacglam.learner.ppo_rollout import rollout_from_segments
    from sacglam.models import GLAMAgent
    from sacglam.rollout_workers.worker import RolloutWorker

    env = EnvConfig.variant("full")
    worker = RolloutWorker(env, 32, seed=0)
    episodes: list = []
    while sum(e.length for e in episodes) < args.ppo_rollout:
        for episode in worker.collect(env.max_steps, None).episodes:
            if sum(e.length for e in episodes) < args.ppo_rollout:
                episodes.append(episode)
    cfg = PPOConfig(rollout_steps=args.ppo_rollout, epochs=2, minibatch_size=args.ppo_minibatch)
    rows = []
    for layers in (None, args.top_layers):
        torch.manual_seed(0)
        agent = GLAMAgent(agent_config(model, args, critic="value", lora_layers=layers)).eval()
        learner = PPOLearner(agent, cfg, seed=0)
        synchronize(args.device)
        start = time.perf_counter()
        rollout, _ = rollout_from_segments(agent, episodes, cfg, np.random.default_rng(0))
        synchronize(args.device)
        rollout_s = time.perf_counter() - start
        # What the ratio compared against before the old policy was taken per minibatch: log-probs
        # of the rollout pass (chunks of 256 states in rollout order), against each minibatch's own
        # forward (a learner with the same seed draws the same minibatches; no weight has moved).
        own = (
            ~rollout.relabeled if rollout.relabeled is not None else torch.ones(len(rollout.actions), dtype=torch.bool)
        )
        probe = PPOLearner(agent, cfg, seed=0)
        per_minibatch = probe.old_policy(rollout, [share for _, share in probe.minibatches(len(rollout.actions))])
        gap = (rollout.old_log_prob - per_minibatch.log_prob)[own].abs()
        start = time.perf_counter()
        metrics = learner.update(rollout)
        synchronize(args.device)
        rows.append(
            {
                "lora_layers": layers or "all",
                "rows": len(rollout.actions),
                "rollout_pass_vs_minibatch_log_prob_gap_max": float(gap.max()),
                "rollout_pass_vs_minibatch_log_prob_gap_mean": float(gap.mean()),
                "minibatch_size": args.ppo_minibatch,
                "epochs": cfg.epochs,
                "rollout_forward_seconds": rollout_s,
                "update_seconds": time.perf_counter() - start,
                "first_step_log_ratio": metrics["ppo/first_step_log_ratio"],
                "first_step_clip_fraction": metrics["ppo/first_step_clip_fraction"],
            }
        )
        del agent, learner, probe
    return rows


def pipeline_runs(model: str, args: Run, out: Path) -> list[dict]:
    """Short SAC-GLAM+HER and PPO-GLAM runs through the local runner (`run_pipeline`)."""
    from sacglam.config import EnvConfig, PipelineConfig, PPOConfig, SACConfig, TrainConfig
    from sacglam.pipeline.run import run_pipeline

    common = dict(
        env=EnvConfig.variant("simple"),
        num_envs=32,
        total_env_steps=args.pipeline_env_steps,
        eval_every=args.pipeline_env_steps,
        eval_episodes=args.eval_episodes,
        warm_start_steps=0,  # a timing check: no language warm start, whatever the model
        progress=False,
        pipeline=PipelineConfig(rollout_workers=2),
    )
    configs = {
        "sac-her": TrainConfig(
            algo="sac-her",
            agent=agent_config(model, args),
            sac=SACConfig.with_her(batch_size=64, gamma=0.9, critic_warmup_updates=4),
            output_dir=out / "sac-her",
            **common,  # type: ignore[arg-type]
        ),
        "ppo": TrainConfig(
            algo="ppo",
            agent=agent_config(model, args, critic="value"),
            ppo=PPOConfig(rollout_steps=min(512, args.pipeline_env_steps), epochs=2, minibatch_size=128, gamma=0.9),
            output_dir=out / "ppo",
            **common,  # type: ignore[arg-type]
        ),
    }
    rows = []
    for name, cfg in configs.items():
        start = time.perf_counter()
        final = run_pipeline(cfg, announce=lambda _: None)
        seconds = time.perf_counter() - start
        rows.append(
            {
                "algo": name,
                "env_steps": cfg.total_env_steps,
                "seconds": seconds,
                "env_steps_per_s": cfg.total_env_steps / seconds,
                "final": {k: v for k, v in final.items() if k.endswith("/all")},
            }
        )
    return rows


def run(args: Run) -> None:
    import tempfile
    import warnings

    import torch

    warnings.filterwarnings("ignore")
    report: dict = {
        "benchmark": "gpu_check",
        "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.processor() or "cpu",
        "torch": torch.__version__,
        "args": {k: str(v) for k, v in vars(args).items()},
        "errors": {},
    }
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        model = random_model(args, Path(tmp) / "model")
        report["model"] = {"layers": args.layers or "as configured", "hidden": args.hidden or "as configured"}
        report["bf16_matmul_tflop_per_s"] = peak = matmul_rate(args.device, torch.bfloat16)
        # Eager figures first, compiled ones last: a run cut short still has the main figures.
        parts: dict[str, Callable[[], object]] = {
            "scoring": lambda: scoring(model, args, peak, compiled=False),
            "dtype_gap": lambda: dtype_gap(model, args),
            "sac_update": lambda: sac_updates(model, args, compiled=False),
            "ppo_update": lambda: ppo_update(model, args),
        }
        if args.pipeline_env_steps:
            parts["pipeline"] = lambda: pipeline_runs(model, args, Path(tmp) / "runs")
        if args.compile:
            parts["scoring_compiled"] = lambda: scoring(model, args, peak, compiled=True)
            parts["sac_update_compiled"] = lambda: sac_updates(model, args, compiled=True)
        args.output.parent.mkdir(parents=True, exist_ok=True)
        for name, part in parts.items():
            part_start = time.perf_counter()
            try:
                report[name] = part()
            except Exception as error:  # one part's failure must not hide the others' figures
                report["errors"][name] = f"{type(error).__name__}: {error}"
                traceback.print_exc()
            report.setdefault("part_seconds", {})[name] = time.perf_counter() - part_start
            print(f"[{time.perf_counter() - started:6.1f} s] {name} done", flush=True)
            args.output.write_text(json.dumps(report, indent=2))  # after every part: a cut run keeps them
    report["seconds"] = time.perf_counter() - started
    print_report(report)
    args.output.write_text(json.dumps(report, indent=2))
    print(f"wrote {args.output}")


def print_report(report: dict) -> None:
    print(f"\n{report['device']}, torch {report['torch']}; bf16 matmul {report['bf16_matmul_tflop_per_s']:.1f} TFLOP/s")
    for r in report.get("scoring", []) + report.get("scoring_compiled", []):
        print(
            f"scoring {'compiled' if r['compiled'] else 'eager':>8} {r['states']:>4} states: {r['states_per_s']:9.1f} "
            f"states/s, {r['tflop_per_s']:7.2f} TFLOP/s = {100 * r['fraction_of_matmul_rate']:.1f}% of the matmul rate"
        )
    if "dtype_gap" in report:
        g = report["dtype_gap"]
        print(
            f"{g['dtype']} vs float32 |log pi|: max {g['max_abs_log_pi_gap']:.4f}, mean {g['mean_abs_log_pi_gap']:.4f}"
        )
    for r in report.get("sac_update", []) + report.get("sac_update_compiled", []):
        print(
            f"SAC update {'compiled' if r['compiled'] else 'eager':>8}, LoRA on {r['lora_layers']!s:>3} blocks, batch "
            f"{r['batch_size']}: {r['seconds_per_update']:.3f} s ({r['gradient_samples_per_s']:.0f} samples/s)"
        )
    for p in report.get("ppo_update", []):
        print(
            f"PPO update, LoRA on {p['lora_layers']!s:>3} blocks, {p['epochs']} epochs over {p['rows']} rows "
            f"(minibatch {p['minibatch_size']}): {p['update_seconds']:.2f} s; "
            f"first step |log ratio| max {p['first_step_log_ratio']:.2e}, clip fraction {p['first_step_clip_fraction']:.3f}; "
            f"rollout-pass log-probs against the minibatch's: max {p['rollout_pass_vs_minibatch_log_prob_gap_max']:.4f}, "
            f"mean {p['rollout_pass_vs_minibatch_log_prob_gap_mean']:.4f}"
        )
    for r in report.get("pipeline", []):
        print(
            f"local runner {r['algo']}: {r['env_steps']} env steps in {r['seconds']:.1f} s ({r['env_steps_per_s']:.0f}/s)"
        )
    for name, error in report["errors"].items():
        print(f"FAILED {name}: {error}")


def main(command: Prepare | Run) -> None:
    if isinstance(command, Prepare):
        prepare(command)
    else:
        run(command)


if __name__ == "__main__":
    main(tyro.extras.subcommand_cli_from_dict({"prepare": Prepare, "run": Run}))
