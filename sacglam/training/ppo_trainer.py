"""PPO-GLAM in one process: collect `rollout_steps` on-policy transitions, compute GAE, update for
`epochs` passes, repeat; evaluations as in the SAC trainer."""

from __future__ import annotations

import time
from collections import deque

import torch
from tqdm.auto import tqdm

from sacglam.config import TrainConfig
from sacglam.learner.ppo import PPOLearner, Rollout
from sacglam.learner.ppo_losses import generalized_advantages
from sacglam.models.agent import GLAMAgent
from sacglam.training.common import EvaluationSchedule, start_run


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
    logger, agent = start_run(cfg)
    learner = PPOLearner(agent, ppo, seed=cfg.seed)
    vec = cfg.env.make_vector(cfg.num_envs)
    obs, info = vec.reset(seed=cfg.seed)
    generator = torch.Generator().manual_seed(cfg.seed)
    recent = deque(maxlen=200)
    env_steps, train_seconds = 0, 0.0
    bar = tqdm(total=cfg.total_env_steps, disable=not cfg.progress, desc="ppo", unit="step")
    evaluate = EvaluationSchedule(agent, cfg, logger, bar)
    while True:
        evaluate(env_steps, train_seconds)
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
    return evaluate.latest
