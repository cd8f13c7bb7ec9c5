"""Can a critic on this LLM read the goal? An offline regression on exact Q values, before any RL run.

The data: simplified Playground-Text (3 objects, 8 steps) played by the expert, by a uniform-random
policy and by a mix (each step expert or random with probability 1/2), `--episodes` episodes of
each on train goals; every state is kept under its own goal and, as the replay buffer's hindsight
relabelling does, under each goal the social partner described later in its episode. Held-out:
the same three behaviours on the held-out goal set (`simple-test`), never trained on.

The targets are exact: the Q of a table policy (the expert's action with probability 1/2, a uniform
candidate otherwise; reward 1 at the goal, which ends the episode; the step limit ignored) by
value iteration over every state reachable in the scene, for every candidate of every state.
The optimal policy's Q would hardly vary here (every goal is 1 to 3 steps away: gamma^k); the
table policy's spreads with the scene and the goal, as a learning policy's does.

The critic: the agent's action critic (the last hidden state of the (prompt, action) pair, the
paper's) regressed with MSE and Adam, in variants:
- `head`: an MLP head on the frozen LLM's features (computed once), raw or standardised per
  dimension (`agent.critic_input_norm`), at several learning rates;
- `lora`: LoRA on the top `--lora-layers` blocks trained with the head (the features move; needs
  a GPU for SmolLM2 at a useful size, `--lora`).

Reported per variant: MSE on the training rows, MSE on the held-out goals' rows, and goal
sensitivity within a goal type: every state's goal swapped for another goal of the same type
(Grasp X -> Grasp Y), the mean |Q(g') - Q(g)| the critic predicts against the exact one, and the
correlation of the predicted change with the exact change. A critic that reads the goal moves Q
as much as the exact values move; one that does not moves it by about 0. A constant predictor's
MSE (the targets' variance) is the floor the errors are read against.

    .venv/bin/python benchmarks/studies/critic_fit.py [--model smollm2-135m] [--episodes 32] [--lora]

Prints a table and writes benchmarks/studies/results/critic_fit/critic_fit.json (or `--output`).
"""

from __future__ import annotations

import functools
import json
import platform
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import tyro

BEHAVIOURS = ("expert", "random", "mixed")


@dataclass(frozen=True)
class Args:
    model: str = "smollm2-135m"
    episodes: int = 32
    """Episodes per behaviour and goal set."""
    gamma: float = 0.9
    device: str = "auto"
    dtype: str = "auto"
    """The base model's dtype (auto: bfloat16 on CUDA, float32 on CPU)."""
    learning_rates: tuple[float, ...] = (1e-4, 3e-4, 1e-3)
    steps: int = 1500
    """Adam steps of each head-only variant (batch `batch_size` rows)."""
    batch_size: int = 256
    width: int = 1024
    lora: bool = False
    """Also train LoRA on the top `lora_layers` blocks with the head (raw and standardised)."""
    lora_layers: int = 4
    lora_steps: int = 300
    lora_learning_rate: float = 1e-4
    """LoRA's rate (the head keeps the best head-only rate of its input)."""
    seed: int = 0
    output: Path = Path("benchmarks/studies/results/critic_fit/critic_fit.json")
    threads: int | None = 2
    variants: tuple[str, ...] = field(default_factory=lambda: ("raw", "standardised"))


# ---------------------------------------------------------------------------- data


@dataclass
class Rows:
    """States (observation text with its goal), their candidates, goals and the table policy's
    exact Q per candidate."""

    observations: list[str] = field(default_factory=list)
    candidates: list[list[str]] = field(default_factory=list)
    goals: list[str] = field(default_factory=list)
    q: list[list[float]] = field(default_factory=list)

    def add(self, observation: str, candidates: list[str], goal: str, gamma: float) -> None:
        self.observations.append(observation)
        self.candidates.append(candidates)
        self.goals.append(goal)
        self.q.append(table_policy_q(observation, candidates, gamma))

    def __len__(self) -> int:
        return len(self.observations)


TABLE_EPSILON = 0.5
"""The table policy: the expert's action with probability 1 - epsilon, a uniform candidate else."""


@functools.cache
def _table_policy_values(observation: str, gamma: float) -> dict[str, float]:
    """Candidate text -> exact Q of the table policy from the observation's state (value iteration
    over every (on, holding, goal stage) reachable from it; reward 1 at the goal, which ends the
    episode; the step limit ignored). A goal this scene cannot achieve has Q = 0 everywhere."""
    from sacglam.envs.dynamics import candidate_actions, transition
    from sacglam.envs.expert import _action_texts, _planning_problem, _search

    names, goal, grows, start = _planning_problem(observation)
    n = len(names)
    edges: dict[tuple, list[tuple[int, tuple, bool]]] = {}
    frontier = [start]
    while frontier:
        state = frontier.pop()
        if state in edges:
            continue
        edges[state] = []
        for code in candidate_actions(n, state[1]):
            on, holding, event = transition(grows, state[0], state[1], code)
            stage = goal.advance(state[2], event)
            child = (on, holding, stage)
            done = stage == goal.n_parts
            edges[state].append((code, child, done))
            if not done and child not in edges:
                frontier.append(child)
    import numpy as np

    order = {state: i for i, state in enumerate(edges)}
    transitions = np.zeros((len(order), len(order)))  # the table policy's state-to-state probabilities
    reward = np.zeros(len(order))  # its expected immediate reward (the goal's 1)
    for state, moves in edges.items():
        plan = _search(goal, grows, n, state)
        for code, child, done in moves:
            p = TABLE_EPSILON / len(moves) if plan is not None else 1.0 / len(moves)
            if plan is not None and code == plan[0]:
                p += 1 - TABLE_EPSILON
            if done:
                reward[order[state]] += p
            else:
                transitions[order[state], order[child]] += p
    # V = r + gamma P V, exactly
    value = np.linalg.solve(np.eye(len(order)) - gamma * transitions, reward)
    return {
        _action_texts([code], names)[0]: 1.0 if done else gamma * float(value[order[child]])
        for code, child, done in edges[start]
    }


def table_policy_q(observation: str, candidates: list[str], gamma: float) -> list[float]:
    values = _table_policy_values(observation, gamma)
    return [values[a] for a in candidates]


def play(goal_set: str, behaviour: str, episodes: int, gamma: float, seed: int, rows: Rows) -> None:
    """Add the states of `episodes` episodes under their own goal and under each goal the social
    partner describes at or after them (hindsight relabelling: achieved later, so reachable)."""
    from sacglam.envs.expert import ExpertPolicy
    from sacglam.envs.observation import split_goal, with_goal
    from sacglam.envs.playground_text import PlaygroundText

    rng = random.Random(f"{goal_set}/{behaviour}/{seed}")
    expert = ExpertPolicy()
    for _ in range(episodes):
        env = PlaygroundText(n_objects=3, goals=goal_set, max_steps=8)
        observation, info = env.reset(seed=rng.randrange(2**31))
        own_goal = split_goal(observation)[0]
        states: list[tuple[str, list[str]]] = []
        achieved_at: list[tuple[int, str]] = []
        done = False
        while not done:
            candidates = list(info["candidates"])
            states.append((observation, candidates))
            use_expert = behaviour == "expert" or (behaviour == "mixed" and rng.random() < 0.5)
            action = expert.act([observation], [candidates])[0] if use_expert else rng.choice(candidates)
            observation, _, terminated, truncated, info = env.step(action)
            achieved_at += [(len(states) - 1, g) for g in info["achieved_goals"] if g != own_goal]
            done = terminated or truncated
        for index, (obs, candidates) in enumerate(states):
            rows.add(obs, candidates, own_goal, gamma)
            for goal in sorted({g for step, g in achieved_at if step >= index}):
                rows.add(with_goal(split_goal(obs)[1], goal), candidates, goal, gamma)


def dataset(goal_set: str, args: Args) -> Rows:
    rows = Rows()
    for behaviour in BEHAVIOURS:
        play(goal_set, behaviour, args.episodes, args.gamma, args.seed, rows)
    return rows


def swapped_within_type(rows: Rows, goal_set: str, gamma: float, seed: int) -> Rows:
    """Every state of `rows` under another goal of its goal's type (from `goal_set`), one the scene
    can achieve when there is one, with its exact Q."""
    from sacglam.config import EnvConfig
    from sacglam.envs.observation import split_goal, with_goal

    spec = EnvConfig(n_objects=3, goals=goal_set, max_steps=8).spec()
    by_type: dict[str, list[str]] = {}
    for goal in spec.goals() or ():
        by_type.setdefault(spec.goal_type(goal), []).append(goal)
    rng = random.Random(f"swap/{goal_set}/{seed}")
    out = Rows()
    for obs, candidates, goal in zip(rows.observations, rows.candidates, rows.goals, strict=True):
        state = split_goal(obs)[1]
        others = [g for g in by_type[spec.goal_type(goal)] if g != goal]
        # a goal this scene can achieve when there is one: what a replay's (achieved) goals are
        reachable = [g for g in others if max(table_policy_q(with_goal(state, g), candidates, gamma)) > 0]
        other = rng.choice(reachable or others or [goal])  # a type with one goal: no swap
        out.add(with_goal(state, other), candidates, other, gamma)
    return out


# ---------------------------------------------------------------------------- features and fits


def build_agent(args: Args, standardise: bool, lora: bool):
    import torch

    from sacglam.config import AgentConfig
    from sacglam.models import GLAMAgent

    torch.manual_seed(args.seed)
    config = AgentConfig(
        model=args.model,
        critic="action",
        critic_width=args.width,
        n_critics=1,
        lora_r=16,
        lora_layers=args.lora_layers if lora else None,  # head only: LoRA at zero, the base's features
        prompt_template="candidates",
        end_of_action=False,
        critic_input_norm="standardise" if standardise else "none",
        device=args.device,
        dtype=args.dtype,  # type: ignore[arg-type]
    )
    agent = GLAMAgent(config)
    if not lora:
        for p in agent.llm.parameters():
            p.requires_grad_(False)
    return agent


def features(agent, rows: Rows, chunk: int = 32):
    """(candidate features (N, H) float32, exact Q targets (N,), state of each row (N,)) of `rows`."""
    import torch

    out, targets, states = [], [], []
    with torch.no_grad():
        for start in range(0, len(rows), chunk):
            batch = agent.encode(rows.observations[start : start + chunk], rows.candidates[start : start + chunk])
            scores = agent.candidate_scores(batch, with_log_likelihood=False)
            out.append(scores.candidate_features.float())
            index = batch.index
            targets += [rows.q[start + s][k] for s, k in zip(index.state.tolist(), index.slot.tolist(), strict=True)]
            states += [start + s for s in index.state.tolist()]
    device = out[0].device
    return torch.cat(out), torch.tensor(targets, device=device), torch.tensor(states, device=device)


def fit_head(critic, x, y, lr: float, steps: int, batch_size: int, seed: int) -> float:
    """Adam on the MSE of critic(x) against y; returns seconds."""
    import torch

    generator = torch.Generator(device="cpu").manual_seed(seed)
    optimizer = torch.optim.Adam(critic.parameters(), lr=lr)
    if critic.input_norm is not None:  # the statistics follow the features it is trained on
        critic.input_norm.learning = True
    start = time.perf_counter()
    for _ in range(steps):
        pick = torch.randint(len(x), (batch_size,), generator=generator).to(x.device)
        loss = (critic(x[pick])[0] - y[pick]).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    if critic.input_norm is not None:
        critic.input_norm.learning = False
    return time.perf_counter() - start


def evaluate(predict, sets: dict) -> dict:
    """MSE per set, and the same-type swap sensitivity of each goal set's states."""
    import torch

    report: dict = {}
    with torch.no_grad():
        predictions = {name: predict(name) for name in sets}
    for name, (_, y, _) in sets.items():
        if not name.endswith("/swapped"):
            report[f"mse/{name}"] = float((predictions[name] - y).pow(2).mean())
    for name in [n for n in sets if not n.endswith("/swapped")]:
        swap = f"{name}/swapped"
        if swap not in sets:
            continue
        predicted = predictions[swap] - predictions[name]
        exact = sets[swap][1] - sets[name][1]
        report[f"swap/{name}/mean_abs_predicted_change"] = float(predicted.abs().mean())
        report[f"swap/{name}/mean_abs_exact_change"] = float(exact.abs().mean())
        centred = torch.stack([predicted - predicted.mean(), exact - exact.mean()])
        report[f"swap/{name}/correlation"] = float(
            (centred[0] * centred[1]).sum() / (centred[0].norm() * centred[1].norm()).clamp(min=1e-12)
        )
    return report


def run(args: Args) -> None:
    import torch

    from sacglam.models.critic import ActionCritic

    if args.threads:
        torch.set_num_threads(args.threads)
    started = time.perf_counter()
    rows = {"train": dataset("simple-train", args), "held_out": dataset("simple-test", args)}
    rows["train/swapped"] = swapped_within_type(rows["train"], "simple-train", args.gamma, args.seed)
    rows["held_out/swapped"] = swapped_within_type(rows["held_out"], "simple-test", args.gamma, args.seed)
    agent = build_agent(args, standardise=False, lora=False)
    device = agent.device
    report: dict = {
        "benchmark": "critic_fit",
        "model": args.model,
        "device": torch.cuda.get_device_name() if device.type == "cuda" else platform.processor() or "cpu",
        "args": {k: str(v) for k, v in vars(args).items()},
        "states": {name: len(r) for name, r in rows.items()},
        "variants": [],
    }
    start = time.perf_counter()
    sets = {name: features(agent, r) for name, r in rows.items()}
    report["feature_seconds"] = time.perf_counter() - start
    x = sets["train"][0]
    report["features"] = feature_geometry(sets, rows)
    report["constant_mse"] = {
        name: float((y - sets["train"][1].mean()).pow(2).mean())
        for name, (_, y, _) in sets.items()
        if "swap" not in name
    }
    print(f"{len(x)} training rows; features in {report['feature_seconds']:.0f} s; {report['features']}", flush=True)
    best_rate: dict[str, float] = {}
    for variant in args.variants:
        best = None
        for lr in args.learning_rates:
            torch.manual_seed(args.seed)
            critic = ActionCritic(x.shape[1], args.width, 1, standardise=variant == "standardised").to(device)
            seconds = fit_head(critic, x, sets["train"][1], lr, args.steps, args.batch_size, args.seed)
            critic.eval()
            row = {"variant": f"head/{variant}", "lr": lr, "steps": args.steps, "seconds": seconds}
            row |= evaluate(lambda name, critic=critic: critic(sets[name][0])[0], sets)
            report["variants"].append(row)
            print(json.dumps(row), flush=True)
            write(report, args.output)  # after each variant: a run cut short keeps what it measured
            if best is None or row["mse/train"] < best[0]:
                best = (row["mse/train"], lr)
        assert best is not None
        best_rate[variant] = best[1]
    if args.lora:
        for variant in args.variants:
            report["variants"].append(fit_lora(args, rows, variant, best_rate[variant]))
            print(json.dumps(report["variants"][-1]), flush=True)
            write(report, args.output)
    report["seconds"] = time.perf_counter() - started
    write(report, args.output)
    print_table(report)
    print(f"wrote {args.output}")


def write(report: dict, output: Path) -> None:
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2))


def feature_geometry(sets: dict, rows: dict) -> dict:
    """What the issue measured by hand: norms, the shared mean's share of the energy, and how much
    of the variance the goal explains (same state text, goal swapped within its type)."""
    x = sets["train"][0]
    mean = x.mean(0)
    energy = x.pow(2).sum(1).mean()
    own, swapped = sets["train"][0], sets["train/swapped"][0]
    return {
        "mean_l2_norm": float(x.norm(dim=1).mean()),
        "shared_mean_energy_fraction": float(mean.pow(2).sum() / energy),
        "largest_mean_dimension": int(mean.abs().argmax()),
        "largest_mean_value": float(mean.abs().max()),
        "cosine_same_action_goal_swapped": float(
            (own * swapped).sum(1).div(own.norm(dim=1) * swapped.norm(dim=1)).mean()
        ),
        "goal_swap_change_over_feature_spread": float(
            (own - swapped).pow(2).sum(1).mean() / (x - mean).pow(2).sum(1).mean()
        ),
    }


def fit_lora(args: Args, rows: dict, variant: str, head_lr: float) -> dict:
    """LoRA on the top blocks + the head, trained on the MSE with features recomputed each step."""
    import torch

    agent = build_agent(args, standardise=variant == "standardised", lora=True)
    train = rows["train"]
    generator = random.Random(args.seed)
    critic_params = list(agent.critic.parameters())
    ids = {id(p) for p in critic_params}
    lora_params = [p for p in agent.parameters() if p.requires_grad and id(p) not in ids]
    optimizer = torch.optim.Adam(
        [{"params": lora_params, "lr": args.lora_learning_rate}, {"params": critic_params, "lr": head_lr}]
    )
    states = max(1, args.batch_size // 6)  # about batch_size candidate rows
    agent.train()
    start = time.perf_counter()
    for _ in range(args.lora_steps):
        pick = [generator.randrange(len(train)) for _ in range(states)]
        batch = agent.encode([train.observations[i] for i in pick], [train.candidates[i] for i in pick])
        with agent.learning_critic_statistics():
            out = agent(batch)
        target = torch.zeros_like(out.q)
        for row, i in enumerate(pick):
            target[row, : len(train.q[i])] = torch.tensor(train.q[i], device=target.device)
        loss = ((out.q - target).pow(2) * out.mask).sum() / out.mask.sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    seconds = time.perf_counter() - start
    agent.eval()
    sets = {name: features(agent, r) for name, r in rows.items()}
    row = {
        "variant": f"lora{args.lora_layers}/{variant}",
        "lr": head_lr,
        "lora_lr": args.lora_learning_rate,
        "steps": args.lora_steps,
        "seconds": seconds,
    }
    return row | evaluate(lambda name: agent.critic(sets[name][0])[0], sets)


def print_table(report: dict) -> None:
    names = [n for n in report["states"] if not n.endswith("/swapped")]
    print(f"\n{report['model']} on {report['device']}; rows: {report['states']}")
    print("constant predictor MSE: " + ", ".join(f"{k} {v:.4f}" for k, v in report["constant_mse"].items()))
    header = f"{'variant':<22} {'lr':>7} " + " ".join(f"{'mse ' + n:>13}" for n in names)
    header += " " + " ".join(f"{'swap ' + n + ' pred/exact (r)':>30}" for n in names)
    print(header)
    for v in report["variants"]:
        cells = " ".join(f"{v[f'mse/{n}']:>13.4f}" for n in names)
        swaps = " ".join(
            f"{v[f'swap/{n}/mean_abs_predicted_change']:>12.3f}/{v[f'swap/{n}/mean_abs_exact_change']:.3f}"
            f" ({v[f'swap/{n}/correlation']:+.2f})".rjust(30)
            for n in names
        )
        print(f"{v['variant']:<22} {v['lr']:>7.0e} {cells} {swaps}")


if __name__ == "__main__":
    run(tyro.cli(Args))
