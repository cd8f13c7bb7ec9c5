"""Does the embedded LLM learn? SmolLM2-135M-Instruct trained by SAC-GLAM+HER and by PPO-GLAM on the
simplified Playground-Text, through the Ray runner, 3 seeds each, from the same zero-shot policy.

Each (method, seed) is one `sacglam train` run of `tune_configs/runs/cpu_smollm2_sac_her.yaml` or
`cpu_smollm2_ppo.yaml` in `runs/smollm2/<method>-seed<k>`, one after the other (2 CPU cores hold
one SmolLM2 run). Runs checkpoint every 1,024 env steps: running this script again resumes an
unfinished run with `sacglam train --resume` and skips finished ones, so the study can span
sessions. Evaluations: 256 episodes per goal set, train and held-out goals, sampled and greedy,
before training (the zero-shot point: the base model, LoRA starting at zero; the SAC run of a seed
measures it and the PPO run of the same seed, whose initial policy and evaluation episodes are
the same, takes it from there) and at the end. The training episodes' success (sampled policy,
train goals) gives the curve in between.

    .venv/bin/python benchmarks/studies/smollm2.py [--seeds 0 1 2] [--methods sac-her ppo]
    .venv/bin/python benchmarks/studies/smollm2.py --analyse-only [--diagnose]

`--diagnose` loads each finished run's final weights (once: the result is kept in the run's
`diagnosis.json`, which later analyses include) and measures, on fresh episodes of both goal
sets (`--diagnosis-episodes` per set, seeds apart from training's and evaluation's): what the
greedy policy picks on the states of the expert's shortest plans (agreement with the expert's
action, by action verb), the policy's entropy there, how far SAC's Q separates the candidates
there, and the critic's accuracy on the sampled policy's own transitions (SAC: Q(s, a) against
the soft n-step return its targets define; PPO: V(s) against the discounted return; both with
episodes run past the step limit, since both critics bootstrap through it: `critic_accuracy`).
The base model's greedy picks and entropy on the same states are measured once per study
(`zero-shot-diagnosis.json` in `--runs`). `goal_probe` asks whether the policy and the critic read
the goal at all: the same expert states under their own goal and under another (`goal-probe.json`
per run, `zero-shot-goal-probe.json` for the base model). Every analysis also measures the uniform-random policy
on each run's own evaluation episodes: the floor the table is read against.

Writes benchmarks/studies/results/smollm2/smollm2.json and curves.png and prints a table: zero-shot and
final success per goal set and policy, per seed, against the target (greedy success on every SAC
seed at least 0.5 on train and 0.3 on held-out goals, and at least PPO-GLAM's).
"""

from __future__ import annotations

import json
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import tyro

CONFIG_SETS = {
    # the first study: 2 CPU cores, Ray, 2 gradient samples per env step to 6k env steps
    "cpu": {"sac-her": "tune_configs/runs/cpu_smollm2_sac_her.yaml", "ppo": "tune_configs/runs/cpu_smollm2_ppo.yaml"},
    # one GPU, the local runner, the tiny model's gradient work (8 samples per env step) to 15k
    "gpu": {"sac-her": "tune_configs/runs/gpu_smollm2_sac_her.yaml", "ppo": "tune_configs/runs/gpu_smollm2_ppo.yaml"},
}
CONFIGS = CONFIG_SETS["cpu"]
SETS = ("simple-train", "simple-test")
POLICIES = ("sampled", "greedy")
TARGETS = {"cpu": {"simple-train": 0.5, "simple-test": 0.3}, "gpu": {"simple-train": 0.8, "simple-test": 0.5}}
TARGET = TARGETS["cpu"]


@dataclass(frozen=True)
class Args:
    seeds: tuple[int, ...] = (0, 1, 2)
    methods: tuple[str, ...] = ("sac-her", "ppo")
    runs: Path = Path("runs/smollm2")
    """Where the runs go (`<method>-seed<k>`)."""
    analyse_only: bool = False
    """Only read the runs that exist and write the results."""
    diagnose: bool = False
    """Also diagnose every finished run's final policy and critic (see the module docstring)."""
    diagnosis_episodes: int = 64
    """Episodes per goal set for each diagnosis (expert episodes and the policy's own)."""
    output: Path = Path("benchmarks/studies/results/smollm2")
    configs: Literal["cpu", "gpu"] = "cpu"
    """Which study's configs and target (`CONFIG_SETS`, `TARGETS`)."""
    parallel: int = 1
    """Runs trained at once (each its own process: on one GPU, as many as fit)."""
    flags: str = ""
    """Flags added to every `sacglam train` command, as one string (e.g. `--flags="--time-limit-s 400"`)."""
    thread_limit: int | None = None
    """OMP/MKL threads of each run's process (None: torch's default)."""


def run_dir(args: Args, method: str, seed: int) -> Path:
    return args.runs / f"{method}-seed{seed}"


def train_command(args: Args, method: str, seed: int) -> list[str] | None:
    """The command that runs (or resumes) one method and seed; None when it has finished."""
    directory = run_dir(args, method, seed)
    if (directory / "learner.pt").exists():
        return None
    command = [sys.executable, "-m", "sacglam", "train"]
    if (directory / "checkpoints" / "latest").exists():
        command += ["--resume", str(directory), "--no-progress"]
    else:
        command += ["--config", CONFIG_SETS[args.configs][method], "--seed", str(seed)]
        command += ["--output-dir", str(directory), "--no-progress"]
    return command + shlex.split(args.flags)


def train_all(args: Args) -> dict[str, float]:
    """Train every (method, seed), `args.parallel` at a time, each logging to its run directory's
    `train.log`; returns each run's wall seconds (of this call)."""
    import os

    env = dict(os.environ)
    if args.thread_limit:
        env.update(OMP_NUM_THREADS=str(args.thread_limit), MKL_NUM_THREADS=str(args.thread_limit))
    queue = [(m, s) for s in args.seeds for m in args.methods]
    running: dict[str, tuple[subprocess.Popen, float]] = {}
    walls: dict[str, float] = {}
    failed = []
    while queue or running:
        while queue and len(running) < args.parallel:
            method, seed = queue.pop(0)
            command = train_command(args, method, seed)
            name = f"{method}/seed{seed}"
            if command is None:
                print(f"{name}: finished", flush=True)
                continue
            directory = run_dir(args, method, seed)
            directory.mkdir(parents=True, exist_ok=True)
            print(" ".join(command), flush=True)
            log = open(directory / "train.log", "a")  # noqa: SIM115 (closed with the process)
            running[name] = (
                subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env),
                time.perf_counter(),
            )
        time.sleep(0.5)
        for name, (process, start) in list(running.items()):
            if process.poll() is None:
                continue
            del running[name]
            walls[name] = time.perf_counter() - start
            print(f"{name}: exit {process.returncode} after {walls[name]:.0f} s", flush=True)
            if process.returncode:
                failed.append(name)
    if failed:
        print(f"failed: {failed} (their train.log says why)", flush=True)
    return walls


def records(directory: Path) -> list[dict]:
    path = directory / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def evaluations(rows: list[dict]) -> dict[int, dict[str, float]]:
    """env step -> {goal set/policy: success} of each evaluation record."""
    out: dict[int, dict[str, float]] = {}
    for row in rows:
        cells = {f"{s}/{p}": row[f"eval/{s}/{p}/all"] for s in SETS for p in POLICIES if f"eval/{s}/{p}/all" in row}
        if cells:
            out.setdefault(row["env_steps"], {}).update(cells)
    return out


def training_curve(rows: list[dict], window: int = 512) -> list[tuple[int, float]]:
    """(env step, success of the training episodes finished in the last `window` env steps)."""
    points = [(r["env_steps"], r["train/episodes"], r["train/successes"]) for r in rows if "train/episodes" in r]
    curve = []
    for step, episodes, successes in points:
        earlier = [p for p in points if p[0] <= step - window]
        if not earlier:
            continue
        _, episodes0, successes0 = earlier[-1]
        if episodes > episodes0:
            curve.append((step, (successes - successes0) / (episodes - episodes0)))
    return curve


def last(rows: list[dict], key: str) -> float | None:
    values = [r[key] for r in rows if key in r]
    return values[-1] if values else None


def random_floor(directory: Path) -> dict[str, float]:
    """Uniform-random success on the run's own evaluation episodes (its seed + 10,000, 256 per goal
    set): the floor its table is read against. {goal set/random: success, all goal types}."""
    from sacglam.config import TrainConfig
    from sacglam.config_io import from_dict
    from sacglam.evaluation import EVAL_SEED_OFFSET, OVERALL, episode_specs, run_episodes, success_by_goal_type
    from sacglam.policies import RandomPolicy

    cfg = from_dict(TrainConfig, json.loads((directory / "config.json").read_text()))
    seed = cfg.seed + EVAL_SEED_OFFSET
    floor = {}
    for goal_set, env in zip(SETS, (cfg.env, cfg.env.held_out)):
        results = run_episodes(RandomPolicy(seed), env, episode_specs(env, cfg.eval_episodes, seed), cfg.num_envs)
        floor[f"{goal_set}/random"] = success_by_goal_type(results, env)[OVERALL]["success"]
    return floor


def analyse(args: Args) -> dict:
    report: dict = {
        "benchmark": "smollm2",
        "configs": CONFIG_SETS[args.configs],
        "target": TARGETS[args.configs],
        "runs": {},
    }
    for method in args.methods:
        for seed in args.seeds:
            directory = run_dir(args, method, seed)
            rows = records(directory)
            if not rows:
                continue
            evals = evaluations(rows)
            zero_shot = evals.get(0)
            if zero_shot is None and method != "sac-her":  # the same initial policy and episodes
                zero_shot = evaluations(records(run_dir(args, "sac-her", seed))).get(0)
            final_step = max((s for s in evals if s > 0), default=None)
            report["runs"][f"{method}/seed{seed}"] = {
                "method": method,
                "seed": seed,
                "random_floor": random_floor(directory),
                "finished": (directory / "learner.pt").exists(),
                "env_steps": rows[-1]["env_steps"],
                "zero_shot": zero_shot,
                "final": evals.get(final_step) if final_step else None,
                "final_env_steps": final_step,
                "training_curve": training_curve(rows),
                "train_seconds": last(rows, "time/train_seconds"),
                "env_steps_per_s": last(rows, "time/env_steps_per_s"),
                "last_learner_record": {
                    k: v
                    for k, v in next((r for r in reversed(rows) if "learner/gradient_steps" in r), {}).items()
                    if k.split("/")[0] in ("loss", "q", "alpha", "entropy", "ppo", "learner", "grad_norm")
                },
            }
    report["summary"] = summary(report["runs"], args)
    return report


DIAGNOSIS_FILE = "diagnosis.json"  # in the run directory: a finished run is diagnosed once
GOAL_PROBE_FILE = "goal-probe.json"  # likewise, `goal_probe`
DIAGNOSIS_SEED = 20_000  # diagnosis episodes share no seed with training (seed) or evaluation (seed + 10,000)


def collect(act, env_config, episodes: int, seed: int) -> list[list[dict]]:
    """Episodes of `env_config` (fixed specs) with `act(envs, observations, candidates) -> steps`, one
    dict per state with its `action` and whatever else the caller records there: per episode its
    steps, each completed with {observation, candidates, reward}."""
    from sacglam.evaluation import episode_specs

    specs = episode_specs(env_config, episodes, seed)
    envs = [env_config.spec().make() for _ in specs]
    state = []
    for env, spec in zip(envs, specs):
        obs, info = env.reset(seed=spec.seed, options={"goal": spec.goal} if spec.goal else None)
        state.append((obs, info["candidates"]))
    trajectories: list[list[dict]] = [[] for _ in specs]
    active = list(range(len(specs)))
    while active:
        steps = act([envs[i] for i in active], [state[i][0] for i in active], [state[i][1] for i in active])
        still = []
        for i, step in zip(active, steps):
            obs, reward, terminated, truncated, info = envs[i].step(step["action"])
            step |= {"observation": state[i][0], "candidates": list(state[i][1]), "reward": float(reward)}
            trajectories[i].append(step)
            state[i] = (obs, info["candidates"])
            if not (terminated or truncated):
                still.append(i)
        active = still
    return trajectories


def load_agent(directory: Path, trained: bool):
    """(config, agent, SAC's final entropy coefficient or None) of a run: its final weights, or with
    `trained=False` its initial policy (the base model: LoRA starts at zero)."""
    import torch

    from sacglam.config import TrainConfig
    from sacglam.config_io import from_dict
    from sacglam.models import GLAMAgent

    cfg = from_dict(TrainConfig, json.loads((directory / "config.json").read_text()))
    torch.manual_seed(cfg.seed)
    agent = GLAMAgent(cfg.agent).eval()
    alpha = None
    if trained:
        learner = torch.load(directory / "learner.pt", weights_only=False)["learner"]
        agent.load_trainable_state_dict(learner["agent"])
        alpha = float(learner["log_alpha"].exp()) if "log_alpha" in learner else None
    return cfg, agent, alpha


def expert_states(env, episodes: int) -> list[dict]:
    """The states of the expert's shortest plans on `episodes` fresh episodes of `env` (one dict per
    state: observation, candidates, the expert's action)."""
    from sacglam.policies import EnvironmentExpert

    expert = EnvironmentExpert(env).act_in
    plans = collect(lambda e, o, c: [{"action": a} for a in expert(e, o, c)], env, episodes, DIAGNOSIS_SEED)
    return [step | {"plan_step": k} for plan in plans for k, step in enumerate(plan)]


def agreement_by_goal_type(env, steps: list[dict], picks: list[str]) -> dict:
    """Where a plan breaks: per goal type, how often the greedy pick is the expert's action and how
    often it starts a shortest plan (another supply can be as good: an animal grows with food or
    water), overall and at each step of the expert's plan (`plan_step` 0 first). A Grow plan is
    three steps (go to the supply, grasp it, go to the thing that grows), a Grasp plan two."""
    from sacglam.envs.expert import plan_length_after
    from sacglam.envs.protocol import split_goal

    spec = env.spec()
    tally: dict[str, dict[int, list[int]]] = {}  # goal type -> plan step -> [agrees, shortest, states]
    for step, pick in zip(steps, picks):
        per_step = tally.setdefault(spec.goal_type(split_goal(step["observation"])[0]), {})
        counts = per_step.setdefault(step["plan_step"], [0, 0, 0])
        shortest = plan_length_after(step["observation"], step["action"])
        counts[0] += pick == step["action"]
        counts[1] += shortest is not None and plan_length_after(step["observation"], pick) == shortest
        counts[2] += 1
    out = {}
    for goal_type, per_step in sorted(tally.items()):
        agrees, shortest, states = (sum(column) for column in zip(*per_step.values()))
        out[goal_type] = {
            "states": states,
            "greedy_agrees_with_expert": agrees / states,
            "greedy_starts_a_shortest_plan": shortest / states,
            "by_plan_step": [
                {
                    "plan_step": k,
                    "states": n,
                    "greedy_agrees_with_expert": a / n,
                    "greedy_starts_a_shortest_plan": m / n,
                }
                for k, (a, m, n) in sorted(per_step.items())
            ],
        }
    return out


def goal_probe(directory: Path, episodes: int, trained: bool = True) -> dict:
    """Does the policy (and SAC's critic) read its goal? On the expert's states of each goal set, the
    same state under its own goal and under another goal **of the same type** from the set (drawn
    uniformly within the type, fixed seed): how far the policy's distribution moves (total
    variation), how often its greedy pick changes, and for a Q-critic how far Q moves against how
    far it spreads across the candidates; overall and per goal type (`by_type`). A reader blind to
    the goal gives 0 change; the spread is the scale a goal effect is read against. Swapping
    within the type keeps the comparison fair: goal types differ in how much they are worth, so a
    swap across types moves Q by the type mix of the swaps, whether or not the goal is read."""
    import random

    import torch

    from sacglam.envs.protocol import split_goal, with_goal

    cfg, agent, _ = load_agent(directory, trained)
    rng = random.Random(DIAGNOSIS_SEED)
    out: dict = {}
    for name, env in (("train", cfg.env), ("held-out", cfg.env.held_out)):
        steps = expert_states(env, episodes)
        spec = env.spec()
        by_type: dict[str, list[str]] = {}
        for goal in spec.goals():
            by_type.setdefault(spec.goal_type(goal), []).append(goal)
        own, swapped, types, kept = [], [], [], []
        for step in steps:
            goal, rest = split_goal(step["observation"])
            others = [g for g in by_type[spec.goal_type(goal)] if g != goal]
            if not others:  # the only goal of its type: nothing to swap with
                continue
            own.append(step["observation"])
            types.append(spec.goal_type(goal))
            swapped.append(with_goal(rest, rng.choice(others)))
            kept.append(step)
        steps = kept
        candidates = [s["candidates"] for s in steps]
        with torch.inference_mode():
            a = agent(agent.encode(own, candidates))
            b = agent(agent.encode(swapped, candidates))
        mask = a.mask.cpu()
        pi_a, pi_b = a.log_pi.float().cpu().exp() * mask, b.log_pi.float().cpu().exp() * mask
        per_state = {
            "policy_total_variation": 0.5 * (pi_a - pi_b).abs().sum(-1),
            "greedy_pick_changes": (pi_a.argmax(-1) != pi_b.argmax(-1)).float(),
        }
        if trained and a.q is not None:
            q_a, q_b = a.q.float().cpu(), b.q.float().cpu()
            n = mask.sum(-1)
            best_a = q_a.masked_fill(~mask, float("-inf"))
            per_state |= {
                "q_mean_own_goal": (q_a * mask).sum(-1) / n,
                "q_mean_other_goal": (q_b * mask).sum(-1) / n,
                "q_mean_abs_change": ((q_a - q_b).abs() * mask).sum(-1) / n,
                "q_mean_spread_across_candidates": best_a.amax(-1) - q_a.masked_fill(~mask, float("inf")).amin(-1),
                "argmax_q_changes": (best_a.argmax(-1) != q_b.masked_fill(~mask, float("-inf")).argmax(-1)).float(),
            }
        probe: dict = {"states": len(steps), "swap": "within the goal type"}
        probe |= {key: float(values.mean()) for key, values in per_state.items()}
        probe["by_type"] = {}
        for goal_type in sorted(set(types)):
            rows = torch.tensor([t == goal_type for t in types])
            probe["by_type"][goal_type] = {"states": int(rows.sum())} | {
                key: float(values[rows].mean()) for key, values in per_state.items()
            }
        out[name] = probe
    return out


def diagnose(directory: Path, episodes: int, trained: bool = True) -> dict:
    """The final policy and critic of one run (see the module docstring); with `trained=False`, the
    run's initial policy (the base model: LoRA starts at zero), without the critic (untrained)."""
    import numpy as np
    import torch

    cfg, agent, alpha = load_agent(directory, trained)
    out: dict = {}
    for name, env in (("train", cfg.env), ("held-out", cfg.env.held_out)):
        steps = expert_states(env, episodes)
        with torch.inference_mode():
            forward = agent(agent.encode([s["observation"] for s in steps], [s["candidates"] for s in steps]))
        greedy = forward.log_pi.argmax(-1).tolist()
        picks = [s["candidates"][g] for s, g in zip(steps, greedy)]
        pick_verbs = [action.split(" ")[0] for action in picks]  # Go, Grasp, Release
        expert_verbs = [s["action"].split(" ")[0] for s in steps]
        diagnosis = {
            "expert_states": len(steps),
            "greedy_agrees_with_expert": float(np.mean([p == s["action"] for p, s in zip(picks, steps)])),
            "greedy_verbs": {v: pick_verbs.count(v) / len(picks) for v in sorted(set(pick_verbs))},
            "expert_verbs": {v: expert_verbs.count(v) / len(steps) for v in sorted(set(expert_verbs))},
            "entropy_on_expert_states": float(
                -(forward.log_pi.exp() * forward.log_pi.masked_fill(~forward.mask, 0.0)).sum(-1).mean()
            ),
            "by_goal_type": agreement_by_goal_type(env, steps, picks),
        }
        if not trained:
            out[name] = diagnosis
            continue
        if forward.q is not None:  # does Q tell the expert's action from the others?
            q, mask = forward.q.float().cpu(), forward.mask.cpu()
            q_pick = q.masked_fill(~mask, float("-inf")).argmax(-1).tolist()
            diagnosis["argmax_q_agrees_with_expert"] = float(
                np.mean([s["candidates"][k] == s["action"] for k, s in zip(q_pick, steps)])
            )
            spread = q.masked_fill(~mask, float("-inf")).amax(-1) - q.masked_fill(~mask, float("inf")).amin(-1)
            expert_k = torch.tensor([s["candidates"].index(s["action"]) for s in steps])
            q_expert = q.gather(1, expert_k[:, None]).squeeze(1)
            others = (q.masked_fill(~mask, 0.0).sum(-1) - q_expert) / (mask.sum(-1) - 1).clamp(min=1)
            diagnosis["q_on_expert_states"] = {
                "mean_spread_max_minus_min": float(spread.mean()),
                "expert_action_minus_mean_of_others": float((q_expert - others).mean()),
            }
        diagnosis["critic"] = critic_accuracy(agent, cfg, env, episodes, alpha)
        out[name] = diagnosis
    return out


DIAGNOSIS_HORIZON = 32  # steps of the critic check's episodes: see critic_accuracy


def critic_accuracy(agent, cfg, env, episodes: int, alpha: float | None) -> dict:
    """The critic's estimate on the sampled policy's own transitions against the return it is
    trained to predict. Both critics bootstrap through the step limit (truncation is not
    termination, and the observation does not show the time left), so a return cut off at the
    limit would understate what they should predict: these episodes run `DIAGNOSIS_HORIZON` steps
    and only their first `env.max_steps` states are scored (the return left after the horizon is
    at most gamma^24 = 0.08 of the state's value). SAC's critic is a soft Q: its n-step target adds
    alpha H(pi(.|s)) at every n-th state after the action, so its return adds that too."""
    import dataclasses

    import numpy as np
    import torch

    sac = cfg.algo != "ppo"
    gamma = cfg.sac.gamma if sac else cfg.ppo.gamma
    n = cfg.sac.n_step if sac else 1
    generator = torch.Generator().manual_seed(DIAGNOSIS_SEED)

    def act(envs, observations, candidates):  # sample from pi; keep the estimate and pi's entropy
        with torch.inference_mode():
            out = agent(agent.encode(list(observations), [list(c) for c in candidates]))
        log_pi = out.log_pi.float().cpu()
        choice = torch.multinomial(log_pi.exp().nan_to_num(0.0), 1, generator=generator).squeeze(1)
        entropy = -(log_pi.exp() * log_pi.masked_fill(~out.mask.cpu(), 0.0)).sum(-1)
        estimate = out.q.float().cpu().gather(1, choice[:, None]).squeeze(1) if sac else out.value.float().cpu()
        return [
            {"action": c[k], "estimate": float(e), "entropy": float(h)}
            for c, k, e, h in zip(candidates, choice.tolist(), estimate, entropy)
        ]

    long_env = dataclasses.replace(env, max_steps=DIAGNOSIS_HORIZON)
    own = collect(act, long_env, episodes, DIAGNOSIS_SEED + 1)
    estimates, hard, soft = [], [], []
    for trajectory in own:
        for t in range(min(env.max_steps, len(trajectory))):
            hard_return = sum(gamma**i * step["reward"] for i, step in enumerate(trajectory[t:]))
            bonus = sum(gamma**j * trajectory[t + j]["entropy"] for j in range(n, len(trajectory) - t, n))
            estimates.append(trajectory[t]["estimate"])
            hard.append(hard_return)
            soft.append(hard_return + (alpha or 0.0) * bonus if sac else hard_return)
    estimate_t, target_t = np.array(estimates), np.array(soft)
    return {
        "transitions": len(estimates),
        "horizon": DIAGNOSIS_HORIZON,
        "success_within_limit": float(np.mean([any(s["reward"] > 0 for s in t[: env.max_steps]) for t in own])),
        "success_within_horizon": float(np.mean([t[-1]["reward"] > 0 for t in own])),
        "alpha": alpha,
        "mean_estimate": float(estimate_t.mean()),
        "mean_return": float(np.mean(hard)),
        "mean_target_return": float(target_t.mean()),
        "mean_abs_error": float(np.abs(estimate_t - target_t).mean()),
        "correlation": float(np.corrcoef(estimate_t, target_t)[0, 1]) if target_t.std() > 0 else None,
    }


def summary(runs: dict, args: Args) -> dict:
    out: dict = {}
    for method in args.methods:
        finals = [r["final"] for r in runs.values() if r["method"] == method and r["final"]]
        if not finals:
            continue
        out[method] = {
            cell: {"mean": statistics.mean(f[cell] for f in finals), "per_seed": [f[cell] for f in finals]}
            for cell in finals[0]
        }
    sac, ppo = out.get("sac-her"), out.get("ppo")
    train, test = TARGETS[args.configs]["simple-train"], TARGETS[args.configs]["simple-test"]
    if sac:
        out["target"] = {
            f"sac_train_greedy_every_seed_at_least_{train}": all(
                v >= train for v in sac["simple-train/greedy"]["per_seed"]
            ),
            f"sac_test_greedy_every_seed_at_least_{test}": all(
                v >= test for v in sac["simple-test/greedy"]["per_seed"]
            ),
            "sac_at_least_ppo_greedy": (
                None
                if not ppo
                else all(sac[c]["mean"] >= ppo[c]["mean"] for c in ("simple-train/greedy", "simple-test/greedy"))
            ),
        }
    return out


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    colours = {"sac-her": "tab:blue", "ppo": "tab:orange"}
    for run in report["runs"].values():
        curve = run["training_curve"]
        if curve:
            axes[0].plot(*zip(*curve), color=colours.get(run["method"], "grey"), alpha=0.8, label=run["method"])
    axes[0].set(xlabel="env steps", ylabel="training success (last 512 env steps)", title="training episodes")
    handles, labels = axes[0].get_legend_handles_labels()
    axes[0].legend(dict(zip(labels, handles)).values(), dict(zip(labels, handles)).keys())
    cells = [f"{s}/{p}" for s in SETS for p in POLICIES]
    width = 0.8 / (1 + len({r["method"] for r in report["runs"].values()}))
    zero = [r["zero_shot"] for r in report["runs"].values() if r["zero_shot"]]
    if zero:
        axes[1].bar(
            [i for i in range(len(cells))],
            [statistics.mean(z[c] for z in zero) for c in cells],
            width,
            label="zero-shot",
            color="tab:grey",
        )
    for k, method in enumerate(m for m in ("sac-her", "ppo") if m in report["summary"]):
        axes[1].bar(
            [i + (k + 1) * width for i in range(len(cells))],
            [report["summary"][method][c]["mean"] for c in cells],
            width,
            label=method,
            color=colours[method],
        )
    floors = [r["random_floor"] for r in report["runs"].values()]
    if floors:  # one floor per goal set: a uniform-random policy has no greedy form
        level = [statistics.mean(f[f"{c.split('/')[0]}/random"] for f in floors) for c in cells]
        left = [i - width / 2 for i in range(len(cells))]
        methods = sum(m in report["summary"] for m in ("sac-her", "ppo"))
        right = [i + (0.5 + methods) * width for i in range(len(cells))]
        axes[1].hlines(level, left, right, colors="black", linestyles="dashed", label="uniform random")
    axes[1].set_xticks([i + width for i in range(len(cells))], [c.replace("simple-", "") for c in cells], fontsize=8)
    axes[1].set(ylabel="success (mean over seeds)", title="evaluation, 256 episodes per goal set")
    axes[1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def print_table(report: dict) -> None:
    cells = [f"{s}/{p}" for s in SETS for p in POLICIES]
    print(f"{'run':<16} {'env steps':>9} " + " ".join(f"{c:>22}" for c in cells) + "  (zero-shot -> final)")
    for name, run in report["runs"].items():
        z, f = run["zero_shot"] or {}, run["final"] or {}
        row = " ".join(f"{z.get(c, float('nan')):>10.3f} -> {f.get(c, float('nan')):<8.3f}" for c in cells)
        floor = " / ".join(f"{run['random_floor'][f'{s}/random']:.3f}" for s in SETS)
        print(f"{name:<16} {run['env_steps']:>9} {row}  random {floor}")
    if "target" in report["summary"]:
        print("target:", report["summary"]["target"])


def main(args: Args) -> None:
    walls = {} if args.analyse_only else train_all(args)
    report = analyse(args)
    for name, seconds in walls.items():
        if name in report["runs"]:
            report["runs"][name]["wall_seconds_this_call"] = seconds
    zero_shot_cached = args.runs / f"zero-shot-{DIAGNOSIS_FILE}"
    first = next((r for r in report["runs"].values() if r["method"] == "sac-her"), None)
    if args.diagnose and first and not zero_shot_cached.exists():
        directory = run_dir(args, "sac-her", first["seed"])
        zero_shot_cached.write_text(json.dumps(diagnose(directory, args.diagnosis_episodes, trained=False), indent=2))
        print("zero-shot", zero_shot_cached.read_text(), flush=True)
    zero_shot_probe = args.runs / f"zero-shot-{GOAL_PROBE_FILE}"
    if args.diagnose and first and not zero_shot_probe.exists():
        directory = run_dir(args, "sac-her", first["seed"])
        zero_shot_probe.write_text(json.dumps(goal_probe(directory, args.diagnosis_episodes, trained=False), indent=2))
    if zero_shot_cached.exists():
        report["zero_shot_diagnosis"] = json.loads(zero_shot_cached.read_text())
    if zero_shot_probe.exists():
        report["zero_shot_goal_probe"] = json.loads(zero_shot_probe.read_text())
    for name, run in report["runs"].items():
        directory = run_dir(args, run["method"], run["seed"])
        for key, file, measure in (
            ("diagnosis", DIAGNOSIS_FILE, diagnose),
            ("goal_probe", GOAL_PROBE_FILE, goal_probe),
        ):
            cached = directory / file
            if args.diagnose and run["finished"] and not cached.exists():
                cached.write_text(json.dumps(measure(directory, args.diagnosis_episodes), indent=2))
                print(name, key, cached.read_text(), flush=True)
            if cached.exists():
                run[key] = json.loads(cached.read_text())
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "smollm2.json").write_text(json.dumps(report, indent=2))
    if report["runs"]:
        plot(report, args.output / "curves.png")
    print_table(report)
    print(f"wrote {args.output / 'smollm2.json'} and curves.png")


if __name__ == "__main__":
    main(tyro.cli(Args))
