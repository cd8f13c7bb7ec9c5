"""One GPU through Ray: the Ray runner's env steps per second against the local runner's and the
learner's bound, with the SmolLM2 study's settings, and where scoring's time goes on the card.

For a GPU machine without internet access. Here, `prepare` writes what that machine may lack:
the wheels of Ray and of this project's small dependencies (`pip download`), each file over
`--part-mb` split into parts with a sha256 manifest, and SmolLM2-135M's config and tokenizer
(the measurements use its architecture with random weights: the same compute). There, `install`
checks every part's sha256, joins them and installs the wheels without an index; `run` measures:

    .venv/bin/python benchmarks/gpu/ray_gpu.py prepare                 # here -> .gpu-ray/
    python benchmarks/gpu/ray_gpu.py install                            # there: checked, joined, pip --no-index
    python benchmarks/gpu/ray_gpu.py run --budget-s 420                 # there, on one GPU, in under 8 minutes

`run`, each part within its share of `--budget-s` (a pipeline run stops at its time limit and
reports the env steps it reached):
1. the learner's bound: SAC-GLAM updates per second at the study's batch (128 transitions, LoRA
   r16 on the top 4 blocks) on replay batches of random play, and the env steps per second that
   rate allows at the study's schedule (2 updates per 32 env steps);
2. the local runner (`tune_configs/runs/gpu_smollm2_sac_her.yaml`): env steps per second of
   training time over `--env-steps`, no evaluation;
3. the Ray runner (`tune_configs/runs/gpu_smollm2_sac_her_ray.yaml`, the inference actor and the
   learner sharing the card) with 2, 4 and 8 rollout workers, likewise;
4. scoring: inference forwards of 256 states split into tokenizing and packing (CPU), the copy to
   the GPU, the forward, and the copy back, with the forward's FLOPs as a share of the card's bf16
   matmul rate.
Prints a table with the ratios Ray / local and Ray / learner bound, and writes JSON (`--output`).
A test rehearses `run` on the CPU with a 2-block model.
"""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import tyro

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))  # gpu_check's measuring helpers
from gpu_check import TOKENIZER_FILES, counted_flops, matmul_rate, synchronize, timed  # noqa: E402

CARRIED = Path(".gpu-ray")
# Packages a GPU machine with torch, transformers, peft and pyarrow may lack: Ray, and this
# project's small dependencies (pip skips those already installed there).
WHEELS = ("ray", "tyro", "docstring-parser", "typeguard", "gguf", "gymnasium", "farama-notifications", "tensorboardX")
LOCAL_CONFIG = ROOT / "tune_configs/runs/gpu_smollm2_sac_her.yaml"
RAY_CONFIG = ROOT / "tune_configs/runs/gpu_smollm2_sac_her_ray.yaml"


@dataclass(frozen=True)
class Prepare:
    """Download the wheels and write the model's config and tokenizer into `out`."""

    out: Path = CARRIED
    part_mb: float = 45.0
    """Largest file carried whole; larger ones travel in parts with their sha256."""
    wheels_from: Path | None = None
    """Take the wheels from this folder instead of downloading them (already downloaded)."""


@dataclass(frozen=True)
class Install:
    """Check and join the parts in `folder`, then install its wheels without an index."""

    folder: Path = CARRIED
    dry_run: bool = False
    """Check and join only; print the pip command instead of running it."""


@dataclass(frozen=True)
class Run:
    """Measure (see the module docstring)."""

    model_dir: Path = CARRIED / "smollm2-arch"
    device: str = "cuda"
    dtype: str = "auto"
    layers: int | None = None
    """Override the block count (the CPU rehearsal uses 2)."""
    hidden: int | None = None
    """Override the width (the CPU rehearsal uses 64)."""
    budget_s: float = 420.0
    """Wall time for the whole measurement (model loading included); each part gets its share."""
    env_steps: int = 4096
    """Env steps of each pipeline run (fewer when its share of the budget ends first)."""
    workers: tuple[int, ...] = (2, 4, 8)
    """Rollout workers of the Ray runs."""
    updates: int = 20
    """Timed learner updates (after 2 warm-up ones)."""
    scoring_states: int = 256
    repeats: int = 5
    small_resources: bool = False
    """Ray actors at fractions of a CPU (a rehearsal on a small CPU machine)."""
    output: Path = Path("benchmarks/gpu/results/ray_gpu/ray_gpu.json")


# ---------------------------------------------------------------------------- here and there


def prepare(args: Prepare) -> None:
    from sacglam.models.loading import embedded_model_dir
    from sacglam.models.parts import split_file

    wheels = args.out / "wheels"
    shutil.rmtree(args.out, ignore_errors=True)
    wheels.mkdir(parents=True)
    if args.wheels_from is not None:
        for wheel in Path(args.wheels_from).glob("*.whl"):
            shutil.copy(wheel, wheels / wheel.name)
    else:
        subprocess.run([sys.executable, "-m", "pip", "download", "--dest", str(wheels), *WHEELS], check=True)
    for wheel in sorted(wheels.glob("*.whl")):
        if wheel.stat().st_size > args.part_mb * 1e6:
            split_file(wheel, [wheels], int(args.part_mb * 1e6))
            wheel.unlink()
    arch = args.out / "smollm2-arch"
    arch.mkdir()
    source = embedded_model_dir("smollm2-135m")
    for name in TOKENIZER_FILES:
        if (source / name).exists():
            shutil.copy(source / name, arch / name)
    size = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file())
    print(
        f"wrote {args.out} ({size / 1e6:.1f} MB): wheels (large ones in checked parts), SmolLM2's config and tokenizer"
    )


def install(args: Install) -> list[str]:
    """Join every manifest's parts (each part and the whole checked), then the pip command."""
    from sacglam.models.parts import join_parts

    wheels = args.folder / "wheels"
    for manifest in sorted(wheels.glob("*.parts.json")):
        name = json.loads(manifest.read_text())["file"]
        join_parts(manifest, wheels / name)
        for part in wheels.glob(f"{name}.part*of*"):
            part.unlink()
        manifest.unlink()
    command = [sys.executable, "-m", "pip", "install", "--no-index", "--find-links", str(wheels)]
    command += [p.name.split("-")[0].replace("_", "-") for p in sorted(wheels.glob("*.whl"))]
    if args.dry_run:
        print(" ".join(command))
    else:
        subprocess.run(command, check=True)
    return command


# ---------------------------------------------------------------------------- measurements


def model_copy(args: Run, out: Path) -> str:
    """SmolLM2's architecture with seeded random weights (blocks and width overridden if asked)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(args.model_dir)
    if args.layers is not None:
        config.num_hidden_layers = args.layers
    if args.hidden is not None:
        config.hidden_size, config.intermediate_size = args.hidden, args.hidden * 8 // 3
        config.num_attention_heads = config.num_key_value_heads = 1
        config.head_dim = args.hidden
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(out)
    AutoTokenizer.from_pretrained(args.model_dir).save_pretrained(out)
    return str(out)


def top_blocks(model: str) -> int:
    """The study's LoRA blocks (the top 4), or every block of a smaller model (the rehearsal's)."""
    from transformers import AutoConfig

    return min(4, AutoConfig.from_pretrained(model).num_hidden_layers)


def study_config(path: Path, model: str, args: Run, out: Path, seconds: float, **changes):
    """A study config on `model`, for `args.env_steps` without evaluation, stopped at `seconds`."""
    from sacglam.config import TrainConfig
    from sacglam.config_io import load_yaml_config

    cfg = load_yaml_config(TrainConfig, str(path))
    agent = replace(cfg.agent, model=model, device=args.device, dtype=args.dtype, lora_layers=top_blocks(model))  # type: ignore[arg-type]
    return replace(
        cfg,
        agent=agent,
        total_env_steps=args.env_steps,
        eval_episodes=0,
        eval_every=args.env_steps,
        output_dir=out,
        progress=False,
        time_limit_s=seconds,
        pipeline=replace(cfg.pipeline, checkpoint_every=0),  # only the final checkpoint
        **changes,
    )


def learner_bound(model: str, args: Run) -> dict:
    import torch

    from sacglam.config import EnvConfig, TrainConfig
    from sacglam.config_io import load_yaml_config
    from sacglam.learner.sac import SACLearner
    from sacglam.models import GLAMAgent
    from sacglam.replay_actor.buffer import ReplayBuffer
    from sacglam.rollout_workers.worker import RolloutWorker

    cfg = load_yaml_config(TrainConfig, str(LOCAL_CONFIG))
    sac = cfg.sac
    env = EnvConfig.variant("simple")
    buffer = ReplayBuffer(100_000, sac.gamma, her=True, prior_goal_set=env.goals, seed=0)
    worker = RolloutWorker(env, 32, seed=0)
    while buffer.env_transitions < 4 * sac.batch_size:
        for episode in worker.collect(env.max_steps, None).episodes:
            buffer.add(episode)
    torch.manual_seed(0)
    agent_cfg = replace(cfg.agent, model=model, device=args.device, dtype=args.dtype, lora_layers=top_blocks(model))  # type: ignore[arg-type]
    learner = SACLearner(GLAMAgent(agent_cfg).eval(), replace(sac, critic_warmup_updates=0))
    batches = [buffer.sample(sac.batch_size, sac.n_step, "ratio") for _ in range(args.updates + 2)]
    for batch in batches[:2]:
        learner.update(batch)
    synchronize(args.device)
    start = time.perf_counter()
    for batch in batches[2:]:
        learner.update(batch)
    synchronize(args.device)
    per_s = args.updates / (time.perf_counter() - start)
    return {
        "batch_size": sac.batch_size,
        "updates_per_s": per_s,
        "env_steps_per_s_bound": per_s * sac.update_every / sac.gradient_steps,
    }


def pipeline_rate(cfg) -> dict:
    """Train `cfg`; its env steps per second of training time (evaluation and start-up excluded)."""
    from sacglam.pipeline.run import run_pipeline
    from sacglam.report import read_metrics

    start = time.perf_counter()
    run_pipeline(cfg, announce=lambda _: None)
    wall = time.perf_counter() - start
    last = [r for r in read_metrics(cfg.output_dir) if "time/train_seconds" in r][-1]
    return {
        "env_steps": last["env_steps"],
        "train_seconds": last["time/train_seconds"],
        "env_steps_per_s": last["env_steps"] / last["time/train_seconds"],
        "wall_seconds": wall,
    }


def scoring_breakdown(model: str, args: Run) -> dict:
    import torch

    from sacglam.config import AgentConfig
    from sacglam.models import GLAMAgent
    from sacglam.models.encoding import to_device

    sys.path.insert(0, str(ROOT))
    from tests.helpers import full_task_states

    observations, candidates = full_task_states(args.scoring_states, 5)
    agent = GLAMAgent(
        AgentConfig(
            model=model,
            lora_r=16,
            lora_layers=top_blocks(model),
            prompt_template="candidates",
            device=args.device,
            dtype=args.dtype,
        )  # fmt: skip
    ).eval()
    device = agent.device
    encoded = agent.encode(observations, candidates)
    on_device = to_device(encoded, device)

    def forward():
        with torch.inference_mode():
            return agent(on_device, with_critic=False)

    out = forward()
    seconds = {
        "tokenize_and_pack": timed(lambda: agent.encode(observations, candidates), "cpu", args.repeats),
        "to_device": timed(lambda: to_device(encoded, device), args.device, args.repeats),
        "forward": timed(forward, args.device, args.repeats),
        "to_host": timed(lambda: out.probs.float().cpu(), args.device, args.repeats),
    }
    flops = counted_flops(forward)
    peak = matmul_rate(args.device, torch.bfloat16)
    total = sum(seconds.values())
    return {
        "states": args.scoring_states,
        "seconds": seconds,
        "shares": {k: v / total for k, v in seconds.items()},
        "forward_tflops": flops / seconds["forward"] / 1e12,
        "bf16_matmul_tflops": peak,
        "forward_share_of_matmul_rate": flops / seconds["forward"] / 1e12 / peak,
        "end_to_end_share_of_matmul_rate": flops / total / 1e12 / peak,
    }


def run(args: Run) -> dict:
    import torch

    from sacglam.config import ResourcesConfig

    started = time.perf_counter()
    device = torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.processor() or "CPU"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    report: dict = {
        "provenance": {  # as benchmarks/manifest.py reads it
            "command": f"python benchmarks/gpu/ray_gpu.py run --budget-s {args.budget_s:g} --env-steps {args.env_steps}",
            "commit": commit.stdout.strip() or "the working tree's (no git here)",
            "machine": device,
            "date": time.strftime("%Y-%m-%d"),
        },
        "benchmark": "ray_gpu",
        "device": device,
        "env_steps": args.env_steps,
        "parts": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        model = model_copy(args, Path(tmp) / "model")
        runs = 1 + len(args.workers)
        left = args.budget_s - (time.perf_counter() - started)
        share = max(10.0, (left - 60.0) / (runs + 1))  # the learner and scoring share one slot
        report["parts"]["learner"] = learner_bound(model, args)
        report["parts"]["scoring"] = scoring_breakdown(model, args)
        report["parts"]["local"] = pipeline_rate(study_config(LOCAL_CONFIG, model, args, Path(tmp) / "local", share))
        for workers in args.workers:
            cfg = study_config(RAY_CONFIG, model, args, Path(tmp) / f"ray-{workers}", share)
            cfg = replace(cfg, pipeline=replace(cfg.pipeline, rollout_workers=workers))
            if args.small_resources:
                small = ResourcesConfig(worker_cpus=0.1, inference_cpus=0.25, learner_cpus=0.5, replay_cpus=0.1)
                cfg = replace(cfg, pipeline=replace(cfg.pipeline, resources=small))
            report["parts"][f"ray-{workers}"] = pipeline_rate(cfg)
            _leave_ray()
    local = report["parts"]["local"]["env_steps_per_s"]
    bound = report["parts"]["learner"]["env_steps_per_s_bound"]
    report["ratios"] = {
        name: {"vs_local": part["env_steps_per_s"] / local, "vs_learner_bound": part["env_steps_per_s"] / bound}
        for name, part in report["parts"].items()
        if name.startswith("ray-")
    }
    report["wall_seconds"] = time.perf_counter() - started
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2))
    print_report(report)
    print(f"wrote {args.output}")
    return report


def _leave_ray() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()


def print_report(report: dict) -> None:
    parts = report["parts"]
    learner = parts["learner"]
    print(f"{report['device']}, {report['env_steps']} env steps per run")
    print(
        f"learner alone: {learner['updates_per_s']:.2f} updates/s at batch {learner['batch_size']} "
        f"-> bound {learner['env_steps_per_s_bound']:.1f} env steps/s"
    )
    print("| runner | env steps | env steps/s | x local | x learner bound |")
    print("| --- | --- | --- | --- | --- |")
    for name, part in parts.items():
        if name in ("learner", "scoring"):
            continue
        ratio = report["ratios"].get(
            name, {"vs_local": 1.0, "vs_learner_bound": part["env_steps_per_s"] / learner["env_steps_per_s_bound"]}
        )
        print(
            f"| {name} | {part['env_steps']} | {part['env_steps_per_s']:.1f} | {ratio['vs_local']:.2f} | "
            f"{ratio['vs_learner_bound']:.2f} |"
        )
    scoring = parts["scoring"]
    split = ", ".join(f"{k} {v:.0%}" for k, v in scoring["shares"].items())
    print(
        f"scoring {scoring['states']} states: {split}; forward {scoring['forward_tflops']:.1f} TFLOP/s = "
        f"{scoring['forward_share_of_matmul_rate']:.1%} of the bf16 matmul rate ({scoring['bf16_matmul_tflops']:.0f})"
    )


def main(command: Prepare | Install | Run) -> None:
    if isinstance(command, Prepare):
        prepare(command)
    elif isinstance(command, Install):
        install(command)
    else:
        run(command)


if __name__ == "__main__":
    main(tyro.extras.subcommand_cli_from_dict({"prepare": Prepare, "install": Install, "run": Run}))
