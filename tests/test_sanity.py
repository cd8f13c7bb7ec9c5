"""The sanity environments (`sacglam/envs/sanity.py`, docs/results/sanity.md): each follows the protocol,
its expert solves it, random play does not; the default warm start leaves a critic able to read
the goal (the likelihood warm start does not); training success counts only rewarded
terminations; and every algorithm solves every sanity environment with the tiny model (slow tier,
budgets and margins measured by `benchmarks/studies/sanity.py`)."""

from __future__ import annotations

import json
import random
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import pytest

from sacglam.config import AgentConfig, EnvConfig, SACConfig, TrainConfig
from sacglam.envs.protocol import check_environment
from sacglam.envs.sanity import CarryWord, GoalCorridor, SayWord
from sacglam.pipeline.run import run_pipeline
from tests.conftest import TEST_THREADS
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


CRITIC_INPUT = load_benchmark("critic_input")
# Seed 0 in the suite; seeds 0-2 under three kernel sets measured (`benchmarks/suite/test_margins.py`,
# docs/development/testing.md): after the default warm start the largest error is at most 0.003, after the
# likelihood one at least 0.750 (a goal-blind critic's), 30x and 1.5x from the thresholds.
CRITIC_FIT_SEED = 0
CRITIC_FIT_READS = 0.1  # the default warm start: the largest error stays below this
CRITIC_FIT_BLIND = 0.5  # the likelihood warm start: the largest error stays above this


def critic_fit_error(objective: str, seed: int) -> float:
    """Warm-start the tiny model on CarryWord (`uniform`: the default warm start, to its target;
    `likelihood`: 300 steps of it, as the configs that used it), then fit its twin action critic
    to CarryWord's optimal Q (gamma 0.9) by full-batch regression, 300 steps with the learner's
    learning rates and clipping (`benchmarks/studies/critic_input.py`); the largest error left over the
    48 (state, goal, action) values."""
    steps = None if objective == "uniform" else 300
    largest, _ = CRITIC_INPUT.fit_error("sacglam.envs.sanity:CarryWord", 2, "last", seed, 300, objective, steps)
    return largest


@pytest.mark.slow
def test_after_the_default_warm_start_a_critic_can_learn_to_read_the_goal(torch_threads):
    """The likelihood warm start trains the action tokens' hidden state towards one that ignores
    the prompt, and the critic reads that state: it cannot fit CarryWord's Q (the goal decides
    which card to take and whether to show it) and stays where a goal-blind critic sits (0.75).
    After the uniform-policy warm start (the default) the same regression fits every value."""
    torch_threads(1)
    assert (uniform := critic_fit_error("uniform", CRITIC_FIT_SEED)) < CRITIC_FIT_READS, uniform
    assert (likelihood := critic_fit_error("likelihood", CRITIC_FIT_SEED)) > CRITIC_FIT_BLIND, likelihood


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
EVAL_EVERY = 1024  # greedy evaluations (64 episodes) along every run
# (environment, method) -> (env steps, greedy success): what seed 0 must reach within the budget in
# the suite. Every pair was measured on seeds 0-2 under three kernel sets (AVX-512, AVX2, ATen's
# `default`: `benchmarks/suite/test_margins.py`, docs/development/testing.md): each run clears its threshold by at
# least 0.08 (five of 64 evaluation episodes), and each budget is at least one evaluation (1,024 env
# steps) past the first at which every measured run had cleared it; the statistic, the best
# evaluation so far, only rises with it. SAC-GLAM on GoalCorridor asks less (0.65): without
# relabeling it can leave one goal unsolved for good (0.73 to 8,192 env steps on one of nine runs),
# where the untrained policy's greedy success is 0.47-0.53.
# The suite's run stops at the first evaluation that reaches the target: the assertion is decided
# there, and what follows could not change it (seed 0 stops after 23,552 of the 45,056 env steps
# the budgets allow under AVX-512 and AVX2 kernels, 25,600 under ATen's `default`).
TARGETS = {
    ("SayWord", "sac-her"): (7168, 0.9),
    ("SayWord", "sac"): (3072, 0.9),
    ("SayWord", "ppo"): (2048, 0.9),
    ("CarryWord", "sac-her"): (3072, 0.9),
    ("CarryWord", "sac"): (4096, 0.9),
    ("CarryWord", "ppo"): (4096, 0.9),
    ("GoalCorridor", "sac-her"): (7168, 0.8),
    ("GoalCorridor", "sac"): (6144, 0.65),
    ("GoalCorridor", "ppo"): (8192, 0.8),
}


def train_for_target(job: tuple) -> dict:
    """One sanity run of `TARGETS` in a worker process (one torch thread): its greedy evaluations
    every `EVAL_EVERY` env steps up to the budget, or (`until_target`) up to the first that
    reaches the target. `job`: (environment, method, root[, seed[, until_target]])."""
    environment, method, root, *rest = job
    seed = rest[0] if rest else 0
    until_target = rest[1] if len(rest) > 1 else False
    budget, success = TARGETS[environment, method]
    directory = Path(root) / f"{environment}-{method}-{seed}"
    stop_at = success if until_target else None
    return SANITY.train_and_evaluate(environment, method, seed, budget, EVAL_EVERY, directory, False, stop_at)


def sanity_statistic(curve: list) -> float:
    """What the test asserts on, for every method: the best greedy evaluation after the start (a
    budget is what a method must reach its target within; a single run's greedy success dips
    between evaluations at times, SAC's as PPO-GLAM's: docs/development/testing.md)."""
    return max(g for step, g, _ in curve if step > 0)


@pytest.fixture(scope="module")
def sanity_runs(tmp_path_factory) -> dict[tuple[str, str], dict]:
    """Every (environment, method) of `TARGETS`, one run per core this process has to itself (one
    torch thread each): two at a time alone, one at a time beside another xdist worker."""
    root = tmp_path_factory.mktemp("sanity")
    order = sorted(TARGETS, key=lambda pair: (pair[1] != "ppo", TARGETS[pair][0]), reverse=True)  # longest first
    jobs = [(environment, method, str(root), 0, True) for environment, method in order]
    with ProcessPoolExecutor(TEST_THREADS, mp_context=get_context("spawn")) as pool:
        return dict(zip(order, pool.map(train_for_target, jobs)))


@pytest.mark.slow
@pytest.mark.parametrize("environment, method", list(TARGETS))
def test_every_algorithm_solves_every_sanity_environment(environment, method, sanity_runs):
    budget, success = TARGETS[environment, method]
    curve = sanity_runs[environment, method]["curve"]
    assert [step for step, _, _ in curve] == list(range(0, curve[-1][0] + 1, EVAL_EVERY)) and curve[-1][0] <= budget
    assert sanity_statistic(curve) >= success, curve
