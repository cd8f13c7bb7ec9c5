"""SAC-GLAM in one process: the loop of the paper's method.

    collect a step in every environment with pi (uniform-random for the first `random_steps`)
    store finished episodes (HER relabels them with the social partner's goals)
    every `update_every` environment steps: `gradient_steps` SAC updates on sampled batches
    every `eval_every` environment steps: success per goal type, train and held-out goals,
        sampled and greedy
"""

from __future__ import annotations

import json
import time
from collections import deque
from dataclasses import asdict

import torch
from tqdm.auto import tqdm

from sacglam.config import TrainConfig
from sacglam.evaluation import OVERALL, episode_specs, run_episodes, success_by_goal_type
from sacglam.learner.sac import SACLearner
from sacglam.models.agent import GLAMAgent
from sacglam.models.policy import LLMPolicy
from sacglam.policies import RandomPolicy
from sacglam.replay_actor.buffer import ReplayBuffer
from sacglam.rollout_workers.recorder import EpisodeRecorder
from sacglam.training.metrics import MetricsLogger
from sacglam.training.warm_start import language_warm_start


def evaluate_agent(agent: GLAMAgent, cfg: TrainConfig, seed: int) -> dict[str, float]:
    """`eval/<goal set>/<sampled|greedy>/<goal type>` success rates."""
    results = {}
    for env_cfg in (cfg.env, cfg.env.held_out):
        specs = episode_specs(env_cfg.goals, cfg.eval_episodes, seed)
        for mode in ("sampled", "greedy"):
            policy = LLMPolicy(agent, greedy=mode == "greedy", seed=seed)
            table = success_by_goal_type(run_episodes(policy, env_cfg, specs, cfg.num_envs), env_cfg.goals)
            for goal_type, row in table.items():
                results[f"eval/{env_cfg.goals}/{mode}/{goal_type}"] = row["success"]
    return results


def train_sac(cfg: TrainConfig) -> dict[str, float]:
    """Train, evaluating along the way; returns the last evaluation's figures."""
    sac = cfg.sac
    torch.manual_seed(cfg.seed)
    cfg.output_dir.mkdir(parents=True, exist_ok=True)
    (cfg.output_dir / "config.json").write_text(json.dumps(asdict(cfg), indent=2, default=str))
    logger = MetricsLogger(cfg.output_dir)
    agent = GLAMAgent(cfg.agent)
    if cfg.warm_start_steps:
        logger.log(0, language_warm_start(agent, cfg.env, steps=cfg.warm_start_steps, seed=cfg.seed))
    learner = SACLearner(agent, sac)
    buffer = ReplayBuffer(
        sac.buffer_capacity, sac.gamma, her=sac.her, her_max_goals=sac.her_max_goals, prior_goal_set=cfg.env.goals, seed=cfg.seed
    )
    vec = cfg.env.make_vector(cfg.num_envs)
    obs, info = vec.reset(seed=cfg.seed)
    recorder = EpisodeRecorder(cfg.num_envs)
    recorder.start(obs, info)
    policy, explore = LLMPolicy(agent, seed=cfg.seed), RandomPolicy(cfg.seed)

    env_steps, gradient_steps, learning_from = 0, 0, None
    recent = deque(maxlen=200)  # success of the last finished training episodes
    train_seconds, last_metrics = 0.0, {}
    next_eval, next_log = 0, cfg.log_every
    bar = tqdm(total=cfg.total_env_steps, disable=not cfg.progress, desc=cfg.algo, unit="step")
    evaluation: dict[str, float] = {}
    while True:
        if env_steps >= next_eval or env_steps >= cfg.total_env_steps:
            evaluation = evaluate_agent(agent, cfg, seed=cfg.seed + 10_000)
            logger.log(env_steps, evaluation | {"time/train_seconds": train_seconds})
            next_eval += cfg.eval_every
            bar.set_postfix(success=f"{evaluation[f'eval/{cfg.env.goals}/sampled/{OVERALL}']:.2f}", alpha=f"{learner.alpha:.3g}")
        if env_steps >= cfg.total_env_steps:
            break
        start = time.perf_counter()
        acting = explore if env_steps < sac.random_steps else policy
        actions = acting.act(obs, info["candidates"])
        obs, rewards, terminated, truncated, info = vec.step(actions)
        env_steps += cfg.num_envs
        for episode in recorder.record(actions, obs, rewards, terminated, truncated, info):
            buffer.add(episode)
            recent.append(episode.terminated)
        if learning_from is None and env_steps >= sac.random_steps and len(buffer) >= sac.batch_size:
            learning_from = env_steps
        if learning_from is not None:
            due = ((env_steps - learning_from) // sac.update_every + 1) * sac.gradient_steps - gradient_steps
            for _ in range(due):
                batch = buffer.sample(sac.batch_size, sac.n_step, sac.sampling, sac.relabeled_fraction)
                last_metrics = learner.update(batch)
                gradient_steps += 1
        train_seconds += time.perf_counter() - start
        bar.update(cfg.num_envs)
        if env_steps >= next_log:
            logger.log(
                env_steps,
                last_metrics
                | {
                    "train/success": sum(recent) / max(len(recent), 1),
                    "train/episodes": buffer.added_episodes,
                    "buffer/transitions": len(buffer),
                    "buffer/relabeled_fraction": buffer.relabeled_transitions / max(len(buffer), 1),
                    "learner/gradient_steps": gradient_steps,
                    "time/train_seconds": train_seconds,
                    "time/env_steps_per_s": env_steps / max(train_seconds, 1e-9),
                },
            )
            next_log += cfg.log_every
    bar.close()
    torch.save(learner.state_dict(), cfg.output_dir / "learner.pt")
    logger.close()
    return evaluation
