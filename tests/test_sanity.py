"""The sanity environments (`sacglam/envs/sanity.py`, docs/sanity.md): each follows the protocol,
its expert solves it, random play does not; the default warm start leaves a critic able to read
the goal (the likelihood warm start does not); training success counts only rewarded
terminations; and every algorithm solves every sanity environment with the tiny model (slow tier,
budgets and margins measured by `benchmarks/sanity.py`)."""

from __future__ import annotations

import json
import random
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import pytest
import torch

from sacglam.config import AgentConfig, EnvConfig, SACConfig, TrainConfig
from sacglam.envs.protocol import check_environment
from sacglam.envs.sanity import CarryWord, GoalCorridor, SayWord
from sacglam.models import GLAMAgent
from sacglam.models.warm_start import language_warm_start
from sacglam.pipeline.run import run_pipeline
from tests.helpers import load_benchmark

ENVIRONMENTS = (SayWord, CarryWord, GoalCorridor)


@pytest.mark.parametrize("env_class", ENVIRONMENTS)
def test_each_follows_the_protocol_and_its_expert_solves_what_random_play_does_not(env_class):
    assert check_environment(env_class()) == {"goal": True, "hindsight": True, "goal_type": False, "goal_reset": True}
    env, rng = env_class(), random.Random(0)
    expert = random_ = 0
    for episode in range(200):
        for policy in ("expert", "random"):
            _, info = env.reset(seed=episode)
            done = False
            while not done:
                action = env.expert_action() if policy == "expert" else rng.choice(info["candidates"])
                _, reward, terminated, truncated, info = env.step(action)
                done = terminated or truncated
            expert += policy == "expert" and reward > 0
            random_ += policy == "random" and reward > 0
    assert expert == 200 and random_ < 0.5 * 200


def carry_word_q_table() -> tuple[list[str], list[list[str]], torch.Tensor, torch.Tensor]:
    """Every state of CarryWord under every goal, with the optimal Q (gamma 0.9) of each candidate:
    (observations, candidates, Q (B, 4) zero-padded, mask (B, 4))."""
    env, rows = CarryWord(), []
    for goal in env.goals:
        wanted = goal.split(" ")[2]
        observation, info = env.reset(options={"goal": goal})
        rows.append((observation, info["candidates"], [0.9 * (w == wanted) for w in env.words]))
        for word in env.words:
            env.reset(options={"goal": goal})
            observation, _, _, _, info = env.step(f"Take the {word} card")
            rows.append((observation, info["candidates"], [float(word == wanted), 0.0]))
    q = torch.zeros(len(rows), 4)
    mask = torch.zeros(len(rows), 4, dtype=torch.bool)
    for i, (_, _, values) in enumerate(rows):
        q[i, : len(values)], mask[i, : len(values)] = torch.tensor(values), True
    return [r[0] for r in rows], [r[1] for r in rows], q, mask


def critic_fit_error(objective: str, steps: int = 300) -> float:
    """Warm-start the tiny model (100 steps of `objective`) on CarryWord, then fit its action critic
    to the optimal Q by full-batch regression (the learner's learning rates and clipping); the
    largest error left over the 48 (state, goal, action) values."""
    cfg = TrainConfig(
        env=EnvConfig(name="sacglam.envs.sanity:CarryWord"),
        agent=AgentConfig(model="tiny-causal", lora_r=0, critic_width=256, n_critics=2),
    )
    torch.manual_seed(0)
    agent = GLAMAgent(cfg.agent).eval()
    language_warm_start(agent, cfg.env, steps=100, seed=0, objective=objective)
    observations, candidates, target, mask = carry_word_q_table()
    critic = list(agent.critic.parameters())
    llm = [p for p in agent.parameters() if p.requires_grad and all(p is not c for c in critic)]
    optimizer = torch.optim.Adam([{"params": llm, "lr": 5e-4}, {"params": critic, "lr": 1e-3}])
    batch = agent.encode(observations, candidates)
    for _ in range(steps):
        q = agent(batch).q_critics  # (2, B, 4)
        loss = 0.5 * (q - target)[:, mask].pow(2).mean(-1).sum()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(llm + critic, 1.0)
        optimizer.step()
    with torch.no_grad():
        return float((agent(batch).q - target)[mask].abs().max())


@pytest.mark.slow
def test_after_the_default_warm_start_a_critic_can_learn_to_read_the_goal():
    """The likelihood warm start trains the action tokens' hidden state towards one that ignores
    the prompt, and the critic reads that state: it cannot fit CarryWord's Q (the goal decides
    which card to take and whether to show it) and stays where a goal-blind critic sits. After the
    uniform-policy warm start (the default) the same regression fits every value."""
    assert critic_fit_error("uniform") < 0.1
    assert critic_fit_error("likelihood") > 0.5


def test_training_success_counts_only_rewarded_terminations(tmp_path):
    """SayWord ends every episode after one step, terminated whether the word was right or not;
    a training episode is a success only when its last step was rewarded."""
    cfg = TrainConfig(
        algo="sac",
        sac=SACConfig(batch_size=16, random_steps=256),  # uniform-random actions throughout
        env=EnvConfig(name="sacglam.envs.sanity:SayWord"),
        agent=AgentConfig(model="tiny-causal", lora_r=0, critic_width=32),
        num_envs=8,
        total_env_steps=256,
        eval_episodes=0,
        log_every=256,
        warm_start_steps=0,
        output_dir=str(tmp_path / "run"),
        progress=False,
    )
    run_pipeline(cfg)
    last = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()][-1]
    assert last["train/episodes"] == 256
    assert 0.1 < last["train/successes"] / last["train/episodes"] < 0.45  # uniform-random: 1 in 4


SANITY = load_benchmark("sanity")
# (environment, method) -> (env steps, greedy success): what seed 0 must reach in the suite. Every
# (budget, success) pair holds on seeds 0-2 (benchmarks/sanity.py, docs/sanity.md). SAC-GLAM without
# relabeling is asked for 3 of CarryWord's 4 goals: one of three seeds settles on a wrong card
# for one goal. PPO-GLAM's greedy success falls back at times after solving, so it is asked for
# its best evaluation (every 1,024 env steps); the SAC methods for their last.
TARGETS = {
    ("SayWord", "sac-her"): (2048, 0.9),
    ("SayWord", "sac"): (4096, 0.9),
    ("SayWord", "ppo"): (2048, 0.9),
    ("CarryWord", "sac-her"): (8192, 0.9),
    ("CarryWord", "sac"): (4096, 0.6),
    ("CarryWord", "ppo"): (4096, 0.9),
    ("GoalCorridor", "sac-her"): (4096, 0.9),
    ("GoalCorridor", "sac"): (6144, 0.9),
    ("GoalCorridor", "ppo"): (8192, 0.9),
}


def train_for_target(job: tuple[str, str, str]) -> dict:
    """One sanity run of `TARGETS` (seed 0) in a worker process: its evaluations."""
    environment, method, root = job
    budget, _ = TARGETS[environment, method]
    every = 1024 if method == "ppo" else budget
    directory = Path(root) / f"{environment}-{method}"
    return SANITY.train_and_evaluate(
        environment, method, 0, budget, every, directory, sampled=False
    )  # greedy is asserted


@pytest.fixture(scope="module")
def sanity_runs(tmp_path_factory) -> dict[tuple[str, str], dict]:
    """Every (environment, method) of `TARGETS`, two runs at a time (one torch thread each: the
    runs are deterministic and the 2 cores halve the wall time of the nine)."""
    root = tmp_path_factory.mktemp("sanity")
    # longest first (SAC updates cost most), so the two processes finish together
    order = sorted(TARGETS, key=lambda pair: (pair[1] != "ppo", TARGETS[pair][0]), reverse=True)
    jobs = [(environment, method, str(root)) for environment, method in order]
    with ProcessPoolExecutor(2, mp_context=get_context("spawn")) as pool:
        return dict(zip(order, pool.map(train_for_target, jobs)))


@pytest.mark.slow
@pytest.mark.parametrize("environment, method", list(TARGETS))
def test_every_algorithm_solves_every_sanity_environment(environment, method, sanity_runs):
    budget, success = TARGETS[environment, method]
    curve = sanity_runs[environment, method]["curve"]
    greedy = [g for step, g, _ in curve if step > 0]
    assert curve[-1][0] == budget and len(greedy) == (budget // 1024 if method == "ppo" else 1)
    assert max(greedy) >= success, curve
    if method != "ppo":
        assert greedy[-1] >= success, curve
