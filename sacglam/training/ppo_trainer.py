"""PPO-GLAM in one process: collect `rollout_steps` on-policy transitions, compute GAE, update for
`epochs` passes, repeat; evaluations as in the SAC trainer."""

from __future__ import annotations

import json
import time
from collections import deque
from dataclasses import asdict

import torch
from tqdm.auto import tqdm

from sacglam.config import TrainConfig
from sacglam.evaluation import OVERALL
from sacglam.learner.ppo import PPOLearner, Rollout
from sacglam.learner.ppo_losses import generalized_advantages
from sacglam.models.agent import GLAMAgent
from sacglam.training.metrics import MetricsLogger
from sacglam.training.sac_trainer import evaluate_agent
from sacglam.training.warm_start import language_warm_start


@torch.no_grad()
def _policy_step(agent: GLAMAgent, observations, candidates, generator):
    out = agent(agent.encode(observations, candidates))
    picks = torch.multinomial(out.probs.float().cpu(), 1, generator=generator).squeeze(1)
    log_prob = out.log_pi.float().cpu().gather(1, picks[:, None]).squeeze(1)
    return picks, log_prob, out.value.float().cpu()


@torch.no_grad()
def _values(agent: GLAMAgent, observations, candidates) -> torch.Tensor:
    return agent(agent.encode(observations, candidates)).value.float().cpu()


def collect_rollout(agent, vec, obs, info, steps_per_env: int, gamma: float, lam: float, generator):
    """Returns (rollout, next obs, next info, successes of the episodes that ended)."""
    T, N = steps_per_env, vec.num_envs
    observations, candidates = [], []
    actions, log_probs, values = torch.zeros(T, N, dtype=torch.long), torch.zeros(T, N), torch.zeros(T, N)
    rewards, final_values = torch.zeros(T, N), torch.zeros(T, N)
    terminated, truncated = torch.zeros(T, N, dtype=torch.bool), torch.zeros(T, N, dtype=torch.bool)
    successes = []
    for t in range(T):
        picks, log_probs[t], values[t] = _policy_step(agent, obs, info["candidates"], generator)
        actions[t] = picks
        observations += obs
        candidates += info["candidates"]
        chosen = [c[i] for c, i in zip(info["candidates"], picks.tolist())]
        obs, step_rewards, term, trunc, info = vec.step(chosen)
        rewards[t], terminated[t], truncated[t] = torch.from_numpy(step_rewards), torch.from_numpy(term), torch.from_numpy(trunc)
        cut = [i for i in range(N) if trunc[i]]
        if cut:  # truncation is not termination: bootstrap from where the episode stopped
            final_values[t, cut] = _values(agent, [info["final_obs"][i] for i in cut], [info["final_info"][i]["candidates"] for i in cut])
        successes += [bool(term[i]) for i in range(N) if term[i] or trunc[i]]
    advantages, returns = generalized_advantages(
        rewards, values, terminated, truncated, final_values, _values(agent, obs, info["candidates"]), gamma, lam
    )
    # observations were appended step by step, so (t, n) row-major flattening matches
    rollout = Rollout(observations, candidates, actions.reshape(-1), log_probs.reshape(-1), advantages.reshape(-1), returns.reshape(-1))
    return rollout, obs, info, successes


def train_ppo(cfg: TrainConfig) -> dict[str, float]:
    ppo = cfg.ppo
    torch.manual_seed(cfg.seed)
    cfg.output_dir.mkdir(parents=True, exist_ok=True)
    (cfg.output_dir / "config.json").write_text(json.dumps(asdict(cfg), indent=2, default=str))
    logger = MetricsLogger(cfg.output_dir)
    agent = GLAMAgent(cfg.agent)
    if cfg.warm_start_steps:
        logger.log(0, language_warm_start(agent, cfg.env, steps=cfg.warm_start_steps, seed=cfg.seed))
    learner = PPOLearner(agent, ppo, seed=cfg.seed)
    vec = cfg.env.make_vector(cfg.num_envs)
    obs, info = vec.reset(seed=cfg.seed)
    generator = torch.Generator().manual_seed(cfg.seed)
    recent = deque(maxlen=200)
    env_steps, train_seconds, next_eval = 0, 0.0, 0
    bar = tqdm(total=cfg.total_env_steps, disable=not cfg.progress, desc="ppo", unit="step")
    evaluation: dict[str, float] = {}
    while True:
        if env_steps >= next_eval or env_steps >= cfg.total_env_steps:
            evaluation = evaluate_agent(agent, cfg, seed=cfg.seed + 10_000)
            logger.log(env_steps, evaluation | {"time/train_seconds": train_seconds})
            next_eval += cfg.eval_every
            bar.set_postfix(success=f"{evaluation[f'eval/{cfg.env.goals}/sampled/{OVERALL}']:.2f}")
        if env_steps >= cfg.total_env_steps:
            break
        start = time.perf_counter()
        rollout, obs, info, successes = collect_rollout(
            agent, vec, obs, info, ppo.rollout_steps // cfg.num_envs, ppo.gamma, ppo.gae_lambda, generator
        )
        recent.extend(successes)
        metrics = learner.update(rollout)
        env_steps += ppo.rollout_steps
        train_seconds += time.perf_counter() - start
        bar.update(ppo.rollout_steps)
        logger.log(
            env_steps,
            metrics
            | {
                "train/success": sum(recent) / max(len(recent), 1),
                "learner/gradient_steps": learner.updates,
                "time/train_seconds": train_seconds,
                "time/env_steps_per_s": env_steps / max(train_seconds, 1e-9),
            },
        )
    bar.close()
    torch.save({"agent": agent.trainable_state_dict(), "optimizer": learner.optimizer.state_dict()}, cfg.output_dir / "learner.pt")
    logger.close()
    return evaluation
