"""SAC-GLAM in one process: the loop of the paper's method.

    collect a step in every environment with pi (uniform-random for the first `random_steps`)
    store finished episodes (HER relabels them with the social partner's goals)
    every `update_every` environment steps: `gradient_steps` SAC updates on sampled batches
    every `eval_every` environment steps: success per goal type, train and held-out goals,
        sampled and greedy
"""

from __future__ import annotations

import time
from collections import deque

import torch
from tqdm.auto import tqdm

from sacglam.config import TrainConfig
from sacglam.learner.sac import SACLearner
from sacglam.models.policy import LLMPolicy
from sacglam.policies import RandomPolicy
from sacglam.replay_actor.buffer import ReplayBuffer
from sacglam.rollout_workers.recorder import EpisodeRecorder
from sacglam.training.common import EvaluationSchedule, start_run


def train_sac(cfg: TrainConfig) -> dict[str, float]:
    """Train, evaluating along the way; returns the last evaluation's figures."""
    sac = cfg.sac
    logger, agent = start_run(cfg)
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
    next_log = cfg.log_every
    bar = tqdm(total=cfg.total_env_steps, disable=not cfg.progress, desc=cfg.algo, unit="step")
    evaluate = EvaluationSchedule(agent, cfg, logger, bar)
    while True:
        evaluate(env_steps, train_seconds, {"alpha": f"{learner.alpha:.3g}"})
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
    return evaluate.latest
