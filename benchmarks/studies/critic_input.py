"""Can the action critic read the goal and the action? A supervised check, no RL: after the default
warm start, regress the tiny model's action critic (twin heads, the LLM trained too, the SAC
learner's learning rates and clipping) onto an environment's exact optimal Q over a fixed set of
its states under every goal, and report the error left. Compares what the critic reads
(`agent.critic_input`): the hidden state at the action's last token (`last`, the paper's) against
the mean over the action's tokens (`mean`).

Environments: the sanity ones (SayWord, CarryWord, GoalCorridor) and Lamps (`tests/foreign_envs.py`),
where every `Toggle the <colour> lamp` ends in the same token and an RL-trained critic could not
tell which lamp (docs/results/sanity.md). Q* comes from exhaustive search over the environment's own
`step` (gamma 0.9), on every state reachable in `--depth` steps from each goal's start.

    .venv/bin/python benchmarks/studies/critic_input.py [--seeds 0 1 2] [--steps 300]

Writes benchmarks/studies/results/critic_input/critic_input.json and prints a table: per environment and critic input,
the largest and the mean absolute error over the Q values after `--steps` full-batch steps,
per seed. `tests/test_sanity.py` reads `fit_error` for its critic check.
"""

from __future__ import annotations

import copy
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import tyro

ROOT = Path(__file__).resolve().parents[2]
GAMMA = 0.9
ENVIRONMENTS = {
    "SayWord": ("sacglam.envs.sanity:SayWord", 1),
    "CarryWord": ("sacglam.envs.sanity:CarryWord", 2),
    "GoalCorridor": ("sacglam.envs.sanity:GoalCorridor", 3),
    "Lamps": ("tests.foreign_envs:Lamps", 2),
}


@dataclass(frozen=True)
class Args:
    environments: tuple[str, ...] = tuple(ENVIRONMENTS)
    critic_inputs: tuple[str, ...] = ("last", "mean")
    seeds: tuple[int, ...] = (0, 1, 2)
    steps: int = 300
    """Full-batch regression steps."""
    threads: int = 2
    output: Path = Path("benchmarks/studies/results/critic_input/critic_input.json")


def _state_key(env, horizon: int) -> str:
    """The environment's whole state (its attributes but the random generator) and the horizon."""
    return repr((horizon, sorted((k, repr(v)) for k, v in vars(env).items() if "random" not in k)))


def action_values(env, candidates: list[str], horizon: int, memo: dict | None = None) -> list[float]:
    """Q*(s, a) for each of the current state's `candidates`, searching `horizon` steps ahead (a
    step past it, like a truncation, is worth 0 after its reward); `memo` keeps searched states."""
    memo = {} if memo is None else memo
    key = _state_key(env, horizon)
    if key not in memo:
        values = []
        for action in candidates:
            child = copy.deepcopy(env)
            _, reward, terminated, truncated, info = child.step(action)
            over = terminated or truncated or horizon <= 1
            future = 0.0 if over else max(action_values(child, info["candidates"], horizon - 1, memo))
            values.append(reward + GAMMA * future)
        memo[key] = values
    return memo[key]


def q_table(env_name: str, depth: int, horizon: int = 8) -> tuple[list[str], list[list[str]], torch.Tensor]:
    """Every state reachable within `depth` steps of each goal's start (start seed 0), its
    candidates and their Q* (searched `horizon` steps ahead): (observations, candidates, Q (B, C)
    zero-padded)."""
    from sacglam.config import EnvConfig

    env_config = EnvConfig(name=env_name)
    rows: list[tuple[str, list[str], list[float]]] = []
    seen: set[tuple[str, tuple[str, ...]]] = set()
    memo: dict[str, list[float]] = {}

    def visit(env, observation: str, candidates: list[str], level: int) -> None:
        if (observation, tuple(candidates)) not in seen:
            seen.add((observation, tuple(candidates)))
            rows.append((observation, candidates, action_values(env, candidates, horizon, memo)))
        if level + 1 >= depth:
            return
        for action in candidates:
            child = copy.deepcopy(env)
            obs, _, terminated, truncated, info = child.step(action)
            if not (terminated or truncated):
                visit(child, obs, info["candidates"], level + 1)

    for goal in env_config.make().goals:
        env = env_config.make()
        observation, info = env.reset(seed=0, options={"goal": goal})
        visit(env, observation, info["candidates"], 0)
    width = max(len(c) for _, c, _ in rows)
    q = torch.zeros(len(rows), width)
    for i, (_, _, values) in enumerate(rows):
        q[i, : len(values)] = torch.tensor(values)
    return [r[0] for r in rows], [r[1] for r in rows], q


def fit_error(
    env_name: str,
    depth: int,
    critic_input: str,
    seed: int,
    steps: int = 300,
    objective: str = "uniform",
    warm_start_steps: int | None = None,
):
    """Warm-start the tiny model on the environment (the default warm start, to its target; or
    `warm_start_steps` fixed steps of `objective`), then fit its twin action critic to Q* by
    full-batch regression; returns (largest, mean) absolute error of the minimum over the twins,
    over every (state, goal, action) value."""
    from sacglam.config import AgentConfig, EnvConfig, TrainConfig
    from sacglam.models import GLAMAgent
    from sacglam.models.warm_start import language_warm_start

    cfg = TrainConfig(
        env=EnvConfig(name=env_name),
        agent=AgentConfig(model="tiny-causal", critic_width=256, n_critics=2, critic_input=critic_input),  # type: ignore[arg-type]
        seed=seed,
    )
    torch.manual_seed(seed)
    agent = GLAMAgent(cfg.agent).eval()
    language_warm_start(
        agent,
        cfg.env,
        steps=warm_start_steps if warm_start_steps is not None else cfg.warm_start_steps or 0,
        seed=seed,
        objective=objective,  # type: ignore[arg-type]
        target_kl=cfg.warm_start_target_kl if warm_start_steps is None else None,
    )
    observations, candidates, target = q_table(env_name, depth)
    batch = agent.encode(observations, candidates)
    mask = batch.index.mask()
    critic = list(agent.critic.parameters())
    llm = [p for p in agent.parameters() if p.requires_grad and all(p is not c for c in critic)]
    optimizer = torch.optim.Adam([{"params": llm, "lr": 5e-4}, {"params": critic, "lr": 1e-3}])
    for _ in range(steps):
        q = agent(batch).q_critics  # (2, B, C)
        loss = 0.5 * (q - target)[:, mask].pow(2).mean(-1).sum()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(llm + critic, 1.0)
        optimizer.step()
    with torch.no_grad():
        error = (agent(batch).q - target)[mask].abs()
    return float(error.max()), float(error.mean())


def main(args: Args) -> None:
    sys.path.insert(0, str(ROOT))
    torch.set_num_threads(args.threads)
    runs = []
    for environment in args.environments:
        name, depth = ENVIRONMENTS[environment]
        values = int(q_table(name, depth)[2].ne(0).sum())
        for critic_input in args.critic_inputs:
            for seed in args.seeds:
                largest, mean = fit_error(name, depth, critic_input, seed, args.steps)
                runs.append(
                    {
                        "environment": environment,
                        "critic_input": critic_input,
                        "seed": seed,
                        "largest": largest,
                        "mean": mean,
                        "nonzero_q_values": values,
                    }  # fmt: skip
                )
                print(
                    f"{environment:<13} {critic_input:<5} seed {seed}: largest {largest:.3f}, mean {mean:.4f}",
                    flush=True,
                )
    print(f"\ncritic regression onto Q*, {args.steps} full-batch steps: largest absolute error per seed (mean)")
    print(f"{'environment':<13} " + " ".join(f"{c:<28}" for c in args.critic_inputs))
    for environment in args.environments:
        cells = []
        for critic_input in args.critic_inputs:
            rows = [r for r in runs if r["environment"] == environment and r["critic_input"] == critic_input]
            cells.append(
                " ".join(f"{r['largest']:.3f}" for r in rows) + f" ({sum(r['mean'] for r in rows) / len(rows):.4f})"
            )
        print(f"{environment:<13} " + " ".join(f"{c:<28}" for c in cells))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"steps": args.steps, "gamma": GAMMA, "runs": runs}, indent=2))


if __name__ == "__main__":
    main(tyro.cli(Args))
