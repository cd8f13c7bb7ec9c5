"""PPO-GLAM in one process: collect `rollout_steps` on-policy transitions, compute GAE (and, with
`ppo.her`, add relabeled transitions: `ppo_her`), update for `epochs` passes, repeat; evaluations
as in the SAC trainer."""

from __future__ import annotations

import time
from collections import deque

import torch
from tqdm.auto import tqdm

from sacglam.config import PPOConfig, TrainConfig
from sacglam.envs.observation import split_goal
from sacglam.learner.ppo import PPOLearner, Rollout
from sacglam.learner.ppo_losses import generalized_advantages
from sacglam.models.agent import GLAMAgent
from sacglam.progress import advance
from sacglam.training.common import EvaluationSchedule, start_run
from sacglam.training.ppo_her import StepRecord, choose_segments, relabel_candidates, relabeled_transitions


@torch.no_grad()
def _policy_step(agent: GLAMAgent, observations, candidates, generator):
    out = agent(agent.encode(observations, candidates))
    picks = torch.multinomial(out.probs.float().cpu(), 1, generator=generator).squeeze(1)
    log_pi = out.log_pi.float().cpu()
    return picks, log_pi.gather(1, picks[:, None]).squeeze(1), out.value.float().cpu(), log_pi


@torch.no_grad()
def _values(agent: GLAMAgent, observations, candidates) -> torch.Tensor:
    return agent(agent.encode(observations, candidates)).value.float().cpu()


def _pad_rows(rows: list[torch.Tensor]) -> torch.Tensor:
    """(N_i, C_i) blocks -> (sum N_i, max C_i), -inf at padding."""
    width = max(r.shape[1] for r in rows)
    return torch.cat([torch.nn.functional.pad(r, (0, width - r.shape[1]), value=float("-inf")) for r in rows])


def collect_rollout(agent, vec, obs, info, steps_per_env: int, cfg: PPOConfig, generator):
    """Returns (rollout, next obs, next info, successes of the episodes that ended, relabeled
    transitions added). With `cfg.her`, the rollout also holds relabeled transitions (`ppo_her`)."""
    T, N = steps_per_env, vec.num_envs
    observations, candidates, records = [], [], []
    actions, log_probs, values = torch.zeros(T, N, dtype=torch.long), torch.zeros(T, N), torch.zeros(T, N)
    rewards, final_values = torch.zeros(T, N), torch.zeros(T, N)
    terminated, truncated = torch.zeros(T, N, dtype=torch.bool), torch.zeros(T, N, dtype=torch.bool)
    behavior = []
    successes = []
    for t in range(T):
        picks, log_probs[t], values[t], log_pi = _policy_step(agent, obs, info["candidates"], generator)
        actions[t] = picks
        behavior.append(log_pi)
        step_obs, step_candidates = list(obs), [list(c) for c in info["candidates"]]
        observations += step_obs
        candidates += step_candidates
        chosen = [c[i] for c, i in zip(info["candidates"], picks.tolist())]
        obs, step_rewards, term, trunc, info = vec.step(chosen)
        rewards[t], terminated[t], truncated[t] = torch.from_numpy(step_rewards), torch.from_numpy(term), torch.from_numpy(trunc)
        cut = [i for i in range(N) if trunc[i]]
        if cut:  # truncation is not termination: bootstrap from where the episode stopped
            final_values[t, cut] = _values(agent, [info["final_obs"][i] for i in cut], [info["final_info"][i]["candidates"] for i in cut])
        successes += [bool(term[i]) for i in range(N) if term[i] or trunc[i]]
        if cfg.her:
            split = [split_goal(o) for o in step_obs]
            records.append(StepRecord(
                states=[state for _, state in split], goals=[goal for goal, _ in split], candidates=step_candidates,
                actions=picks.tolist(), old_log_prob=log_probs[t].clone(), behavior_log_pi=log_pi,
                reported=[tuple(g) for g in info["achieved_goals"]], ended=[bool(a or b) for a, b in zip(term, trunc)],
            ))
    advantages, returns = generalized_advantages(
        rewards, values, terminated, truncated, final_values, _values(agent, obs, info["candidates"]), cfg.gamma, cfg.gae_lambda
    )
    # observations were appended step by step, so (t, n) row-major flattening matches
    parts = {
        "observations": observations, "candidates": candidates, "actions": actions.reshape(-1),
        "old_log_prob": log_probs.reshape(-1), "advantages": advantages.reshape(-1), "returns": returns.reshape(-1),
        "behavior_log_pi": _pad_rows(behavior), "clip_center": torch.ones(T * N),
    }
    added = 0
    if cfg.her:
        segments = choose_segments(relabel_candidates(records, cfg.her_aligned), int(cfg.her_ratio * T * N), generator)
        if segments:
            extra = relabeled_transitions(agent, records, segments, cfg.gamma, cfg.gae_lambda, cfg.her_centered)
            added = len(extra["actions"])
            parts["observations"] = parts["observations"] + extra["observations"]
            parts["candidates"] = parts["candidates"] + extra["candidates"]
            for key in ("actions", "old_log_prob", "advantages", "returns", "clip_center"):
                parts[key] = torch.cat([parts[key], extra[key]])
            parts["behavior_log_pi"] = _pad_rows([parts["behavior_log_pi"], extra["behavior_log_pi"]])
    return Rollout(**parts), obs, info, successes, added


def train_ppo(cfg: TrainConfig) -> dict[str, float]:
    ppo = cfg.ppo
    logger, agent = start_run(cfg)
    learner = PPOLearner(agent, ppo, seed=cfg.seed)
    vec = cfg.env.make_vector(cfg.num_envs)
    obs, info = vec.reset(seed=cfg.seed)
    generator = torch.Generator().manual_seed(cfg.seed)
    recent = deque(maxlen=200)
    env_steps, train_seconds, episodes, successful = 0, 0.0, 0, 0
    bar = tqdm(total=cfg.total_env_steps, disable=not cfg.progress, desc="ppo", unit="step")
    evaluate = EvaluationSchedule(agent, cfg, logger, bar)
    while True:
        evaluate(env_steps, train_seconds)
        if env_steps >= cfg.total_env_steps:
            break
        start = time.perf_counter()
        rollout, obs, info, successes, relabeled = collect_rollout(
            agent, vec, obs, info, ppo.rollout_steps // cfg.num_envs, ppo, generator
        )
        recent.extend(successes)
        episodes, successful = episodes + len(successes), successful + sum(successes)
        metrics = learner.update(rollout)
        env_steps += ppo.rollout_steps
        train_seconds += time.perf_counter() - start
        advance(bar, ppo.rollout_steps)
        logger.log(
            env_steps,
            metrics
            | {
                "train/success": sum(recent) / max(len(recent), 1),
                "train/episodes": episodes,  # cumulative, as the SAC driver logs them
                "train/successes": successful,
                "ppo/relabeled_transitions": relabeled,
                "learner/gradient_steps": learner.updates,
                "time/train_seconds": train_seconds,
                "time/env_steps_per_s": env_steps / max(train_seconds, 1e-9),
            },
        )
    bar.close()
    torch.save({"agent": agent.trainable_state_dict(), "optimizer": learner.optimizer.state_dict()}, cfg.output_dir / "learner.pt")
    logger.close()
    return evaluate.latest
