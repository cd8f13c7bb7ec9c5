"""The SmolLM2 study on one GPU machine without internet access: the embedded model carried in
checked parts, a smoke run that sizes the study, and the study itself
(`benchmarks/studies/smollm2.py --configs gpu`: SAC-GLAM+HER and PPO-GLAM, 3 seeds each, all at
once on the one GPU, the local runner in bfloat16).

The machine cannot download SmolLM2, and its GGUF (98 MB) may be larger than one copy to the
machine may be, so it travels in two parts of under 50 MB, each with its sha256:

    .venv/bin/python benchmarks/gpu/smollm2_gpu.py prepare     # here: parts in .gpu/ and .gpu2/ (< 50 MB each), sha256s
    # copy .gpu/ (part 1, the manifest, the architecture's config and tokenizer) to the GPU machine, then there:
    python benchmarks/gpu/smollm2_gpu.py smoke                   # random weights, SmolLM2's shape: sizes the study; keeps part 1 in runs/gpu-parts/
    # copy .gpu2/ (part 2), then there:
    python benchmarks/gpu/smollm2_gpu.py assemble                # checks both parts and the whole, converts once
    python benchmarks/gpu/smollm2_gpu.py study --budget-s 460    # the study, sized by the smoke run, and its report

The smoke copies part 1 into `runs/gpu-parts/`, where `assemble` looks for it by default, so
`.gpu/` need not stay on the machine after the smoke.

`smoke` runs every (method, seed) of the study at once for `--smoke-env-steps` on a model of
SmolLM2's architecture and tokenizer with random weights (the same compute per step as the real
one), and keeps each run's wall time and training time in `runs/gpu-smoke/`. `study` reads them:
model loading, the cost of an evaluation (scaled to 256 episodes) and the time left give each run's
`--time-limit-s`, so every run ends with its final evaluation inside `--budget-s` even when 15k env
steps do not fit (the report gives the env steps each run reached). Outputs, in `--output`:
smollm2.json and curves.png (`benchmarks/studies/smollm2.py`'s report), sizing.json, runs.tar.gz (each
run's config, metrics and log; no checkpoints) and the final trainable weights of seed 0 of each
method (`<method>-seed0-weights.pt`: LoRA, heads, the critic's input statistics) for diagnosis
elsewhere.
"""

from __future__ import annotations

import json
import shlex
import shutil
import statistics
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

import tyro

FIRST, SECOND = Path(".gpu"), Path(".gpu2")
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
ARCH = FIRST / "arch"
ARCH_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
SMOKE_RUNS = Path("runs/gpu-smoke")
KEPT_PARTS = Path("runs/gpu-parts")  # part 1, kept for `assemble` once the smoke has run
STUDY_RUNS = Path("runs/gpu-smollm2")
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Prepare:
    """Split the embedded GGUF into two parts (part 1 in `first`, part 2 in `second`) with a
    sha256 manifest in both, and copy the architecture's config and tokenizer into `first`."""

    first: Path = FIRST
    second: Path = SECOND
    max_part_mb: float = 49.5
    arch: bool = True
    """Also copy the architecture's config and tokenizer (what the smoke run needs)."""


@dataclass(frozen=True)
class Smoke:
    """Every run of the study at once, briefly, on random weights of SmolLM2's shape."""

    seeds: tuple[int, ...] = (0, 1, 2)
    methods: tuple[str, ...] = ("sac-her", "ppo")
    arch: Path = ARCH
    runs: Path = SMOKE_RUNS
    smoke_env_steps: int = 1024
    eval_episodes: int = 64
    flags: str = ""
    """More flags for every run, one string (the CPU rehearsal shrinks the model and the batches)."""
    thread_limit: int = 2
    first: Path = FIRST
    """Where part 1 and its manifest were copied to (it need not stay after the smoke)."""
    keep_parts: Path = KEPT_PARTS
    """Where the smoke copies them for `assemble` (nothing is copied when `first` is absent)."""


@dataclass(frozen=True)
class Assemble:
    """Join and check the parts, then convert the GGUF into the cache (`$SACGLAM_CACHE`)."""

    first: tuple[Path, ...] = (KEPT_PARTS, FIRST)
    """Where part 1 may be: where the smoke kept it, or the folder it was copied to."""
    second: Path = SECOND
    """Part 2 and the manifest (`prepare` writes it beside both parts)."""
    out: Path = Path("/tmp/smollm2-gguf")
    convert: bool = True


@dataclass(frozen=True)
class Study:
    """The study (`benchmarks/studies/smollm2.py --configs gpu`), sized by the smoke run to `budget_s`."""

    budget_s: float = 420.0
    """Wall seconds for the runs, their final evaluations included."""
    seeds: tuple[int, ...] = (0, 1, 2)
    methods: tuple[str, ...] = ("sac-her", "ppo")
    runs: Path = STUDY_RUNS
    smoke_runs: Path = SMOKE_RUNS
    eval_episodes: int = 256
    margin_s: float = 25.0
    """Kept back from the budget for checkpoints and what the estimate misses."""
    flags: str = ""
    """More flags for every run, one string."""
    thread_limit: int = 2
    output: Path = Path("benchmarks/gpu/results/smollm2_gpu")
    weights_of_seed: int = 0


# ---------------------------------------------------------------------------- prepare / assemble


def prepare(args: Prepare) -> None:
    from sacglam.models.loading import embedded_gguf_path, embedded_model_dir
    from sacglam.models.parts import split_file

    gguf = embedded_gguf_path("smollm2-135m")
    gguf_name = gguf.name
    limit = int(args.max_part_mb * 1e6)
    manifests = split_file(gguf, [args.first, args.second], max_part_bytes=limit)
    manifest = json.loads(manifests[0].read_text())
    if len(manifest["parts"]) != 2:
        raise SystemExit(f"{gguf_name} makes {len(manifest['parts'])} parts of at most {limit} bytes; two are expected")
    if args.arch:  # from the converted model (the GGUF is converted once if the cache has no copy)
        source = embedded_model_dir("smollm2-135m")
        (args.first / "arch").mkdir(parents=True, exist_ok=True)
        for name in ARCH_FILES:
            if (source / name).exists():
                shutil.copy(source / name, args.first / "arch" / name)
    for part in manifest["parts"]:
        print(f"{part['name']}: {part['size'] / 1e6:.1f} MB, sha256 {part['sha256']}")
    print(f"{gguf_name}: {manifest['size'] / 1e6:.1f} MB, sha256 {manifest['sha256']}; manifests {manifests}")


def assemble(args: Assemble) -> None:
    from sacglam.models.loading import install_embedded_model
    from sacglam.models.parts import join_parts, manifest_name, sha256_of

    start = time.perf_counter()
    gguf = join_parts(args.second / manifest_name(GGUF_NAME), args.out / GGUF_NAME, search=list(args.first))
    print(f"joined and checked {gguf} (sha256 {sha256_of(gguf)}) in {time.perf_counter() - start:.1f} s", flush=True)
    if args.convert:
        start = time.perf_counter()
        print(f"converted into {install_embedded_model('smollm2-135m', gguf)} in {time.perf_counter() - start:.1f} s")


# ---------------------------------------------------------------------------- smoke / study


def random_weights(arch: Path, out: Path) -> Path:
    """SmolLM2's architecture and tokenizer (`arch`), seeded random weights (not the model's)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    if (out / "config.json").exists():
        return out
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(arch)).save_pretrained(out)
    AutoTokenizer.from_pretrained(arch).save_pretrained(out)
    return out


def study_args(runs: Path, seeds, methods, flags, thread_limit: int, output: Path):
    """`benchmarks/studies/smollm2.py`'s Args for the GPU configs, every run at once."""
    sys.path.insert(0, str(ROOT / "benchmarks" / "studies"))
    import smollm2

    return smollm2, smollm2.Args(
        seeds=tuple(seeds),
        methods=tuple(methods),
        runs=runs,
        configs="gpu",
        parallel=len(seeds) * len(methods),
        flags=" ".join(shlex.quote(f) for f in flags),
        thread_limit=thread_limit,
        output=output,
    )


def keep_first_part(first: Path, keep: Path) -> None:
    """Copy part 1 and its manifest out of the folder it came in, into one `assemble` reads."""
    parts = sorted(first.glob(f"{GGUF_NAME}.part[0-9]*")) + sorted(first.glob(f"{GGUF_NAME}.parts.json"))
    if not parts:
        return
    keep.mkdir(parents=True, exist_ok=True)
    for part in parts:
        shutil.copy(part, keep / part.name)
    print(f"kept {[p.name for p in parts]} in {keep} for `assemble`", flush=True)


def smoke(args: Smoke) -> None:
    keep_first_part(args.first, args.keep_parts)
    model = random_weights(args.arch, args.runs / "model")
    flags = ["--agent.model", str(model), "--total-env-steps", str(args.smoke_env_steps)]
    flags += ["--eval-every", str(args.smoke_env_steps), "--eval-episodes", str(args.eval_episodes)]
    flags += shlex.split(args.flags)
    smollm2, study = study_args(args.runs, args.seeds, args.methods, flags, args.thread_limit, args.runs / "report")
    start = time.perf_counter()
    walls = smollm2.train_all(study)
    timings = run_timings(smollm2, study, walls)
    timings |= {
        "eval_episodes": args.eval_episodes,
        "env_steps": args.smoke_env_steps,
        "seconds": time.perf_counter() - start,
    }
    (args.runs / "timings.json").write_text(json.dumps(timings, indent=2))
    print(json.dumps(timings, indent=2))


def run_timings(smollm2, study, walls: dict[str, float]) -> dict:
    """Per run: wall seconds, training seconds (evaluations excluded), env steps and their rate."""
    runs = {}
    for method in study.methods:
        for seed in study.seeds:
            directory = smollm2.run_dir(study, method, seed)
            rows = smollm2.records(directory)
            config = json.loads((directory / "config.json").read_text()) if (directory / "config.json").exists() else {}
            name = f"{method}/seed{seed}"
            train = smollm2.last(rows, "time/train_seconds")
            runs[name] = {
                "method": method,
                "wall_s": walls.get(name),
                "train_s": train,
                "env_steps": rows[-1]["env_steps"] if rows else 0,
                "evaluations": len(smollm2.evaluations(rows)),
                "rollout_steps": config.get("ppo", {}).get("rollout_steps") if method == "ppo" else None,
            }
    return {"runs": runs}


def time_limit(timings: dict, budget_s: float, eval_episodes: int, margin_s: float) -> dict:
    """Each run's `--time-limit-s` from the smoke run: wall = load + limit + final evaluation,
    where the limit's clock starts once the model is loaded and covers SAC's zero-shot evaluation,
    less one PPO rollout and its update (PPO stops at the end of the rollout it is in).
    The smoke's SAC runs evaluate twice and its PPO runs once, which separates an evaluation's cost
    from loading's; an evaluation of `eval_episodes` is scaled from the smoke's by episodes."""
    overheads: dict[str, list[float]] = {}
    for run in timings["runs"].values():
        if run["wall_s"] is not None and run["train_s"] is not None:
            overheads.setdefault(run["method"], []).append((run["wall_s"] - run["train_s"]) / 1.0)
    sac, ppo = overheads.get("sac-her"), overheads.get("ppo")
    if not sac or not ppo:
        return {"time_limit_s": budget_s - 120.0, "why": "no smoke timings: a guess (budget - 120 s)"}
    one_eval = max(0.0, statistics.median(sac) - statistics.median(ppo))
    load = max(5.0, statistics.median(ppo) - one_eval)
    final_eval = one_eval * eval_episodes / timings["eval_episodes"]
    # PPO stops at the end of the rollout it is in when the limit comes: up to one more rollout
    # and its update, at the smoke's PPO rate (env steps per training second, updates included).
    ppo_runs = [r for r in timings["runs"].values() if r["method"] == "ppo" and r["train_s"]]
    ppo_rollout = statistics.median((r.get("rollout_steps") or 1024) * r["train_s"] / r["env_steps"] for r in ppo_runs)
    limit = budget_s - load - final_eval - margin_s - ppo_rollout
    return {
        "time_limit_s": max(30.0, limit),
        "load_s": load,
        "smoke_eval_s": one_eval,
        "final_eval_s_estimate": final_eval,
        "ppo_rollout_s_estimate": ppo_rollout,
        "budget_s": budget_s,
        "margin_s": margin_s,
        "smoke_train_env_steps_per_s": {
            name: run["env_steps"] / run["train_s"] for name, run in timings["runs"].items() if run["train_s"]
        },
    }


def study(args: Study) -> None:
    started = time.perf_counter()
    smoke_timings = args.smoke_runs / "timings.json"
    timings = json.loads(smoke_timings.read_text()) if smoke_timings.exists() else {"runs": {}}
    sizing = time_limit(timings, args.budget_s, args.eval_episodes, args.margin_s)
    print("sizing:", json.dumps(sizing), flush=True)
    flags = ["--time-limit-s", f"{sizing['time_limit_s']:.0f}", "--eval-episodes", str(args.eval_episodes)]
    flags += shlex.split(args.flags)
    smollm2, study_config = study_args(args.runs, args.seeds, args.methods, flags, args.thread_limit, args.output)
    smollm2.main(study_config)  # trains every run at once, then analyses and writes the report
    sizing["study_wall_s"] = time.perf_counter() - started
    sizing["device"] = device_name()  # after the runs: no CUDA context of this process beside them
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "sizing.json").write_text(json.dumps(sizing, indent=2))
    with tarfile.open(args.output / "runs.tar.gz", "w:gz") as tar:
        for run in sorted(args.runs.iterdir()):
            for name in ("config.json", "metrics.jsonl", "train.log", "report.md"):
                if (run / name).exists():
                    tar.add(run / name, arcname=f"{run.name}/{name}")
    for method in args.methods:
        keep_weights(
            args.runs / f"{method}-seed{args.weights_of_seed}",
            args.output / f"{method}-seed{args.weights_of_seed}-weights.pt",
        )
    print(f"study: {sizing['study_wall_s']:.0f} s; wrote {sorted(p.name for p in args.output.iterdir())}")


def device_name() -> str:
    """The machine's accelerator, which the runs use with `agent.device: auto` (the default of
    the GPU configs), for the report."""
    import platform

    import torch

    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}"
    return f"CPU ({platform.processor() or platform.machine()}), torch {torch.__version__}"


def keep_weights(run: Path, out: Path) -> None:
    """The run's final trainable weights (what `GLAMAgent.load_trainable_state_dict` takes)."""
    import torch

    source = run / "learner.pt"
    if not source.exists():
        return
    torch.save(torch.load(source, weights_only=False)["learner"]["agent"], out)


def main(command: Prepare | Smoke | Assemble | Study) -> None:
    {Prepare: prepare, Smoke: smoke, Assemble: assemble, Study: study}[type(command)](command)  # type: ignore[operator]


if __name__ == "__main__":
    main(
        tyro.extras.subcommand_cli_from_dict({"prepare": Prepare, "smoke": Smoke, "assemble": Assemble, "study": Study})
    )
