"""Language warm start for random-initialised models (docs/algorithms.md, "Language warm start").

A random-initialised LM gives every token about the same log-probability, so a 4-token action
scores about 4x lower than a 1-token one: its initial policy almost never picks a `Go to` action
and cannot explore. The warm start trains the LM, by next-token likelihood, on the action tokens
of uniform-random transcripts of the environment (no reward, no goal information), which brings
the policy close to uniform over the candidates. It is a deviation from the paper (whose actor is
pre-trained): apply it to every compared method alike, and not to pre-trained models.
"""

from __future__ import annotations

import random
from typing import Literal

import torch

from sacglam.config import EnvConfig
from sacglam.models.agent import GLAMAgent


def random_transcript(
    env_config: EnvConfig, transitions: int, seed: int
) -> tuple[list[str], list[list[str]], list[int]]:
    """`transitions` (observation, candidates, uniformly chosen candidate index) triples."""
    env, rng = env_config.make(), random.Random(seed)
    obs, info = env.reset(seed=seed)
    observations, candidates, chosen = [], [], []
    for _ in range(transitions):
        index = rng.randrange(len(info["candidates"]))
        observations.append(obs)
        candidates.append(info["candidates"])
        chosen.append(index)
        obs, _, terminated, truncated, info = env.step(info["candidates"][index])
        if terminated or truncated:
            obs, info = env.reset()
    return observations, candidates, chosen


def language_warm_start(
    agent: GLAMAgent,
    env_config: EnvConfig,
    steps: int = 300,
    transitions: int = 2000,
    batch_size: int = 64,
    lr: float = 1e-3,
    seed: int = 0,
    objective: Literal["uniform", "likelihood"] = "uniform",
) -> dict[str, float]:
    """Train the LLM (not the critic) on states of a uniform-random transcript; returns the first
    and last loss. `likelihood`: maximise log P_LLM(a|s) of the uniformly chosen actions (next-token
    likelihood of their tokens). `uniform`: minimise the cross-entropy from the uniform policy,
    -mean_a log pi(a|s) over each state's candidates, which is zero-gradient once the policy is
    uniform. Both remove the short-action bias; the likelihood objective also drives the hidden
    state at the action tokens towards one that ignores the prompt (the best next-token prediction
    of a random action is the same in every state), which leaves a critic reading that state unable
    to tell goals apart (docs/sanity.md); the uniform objective asks for no more than the policy."""
    if objective not in ("likelihood", "uniform"):
        raise ValueError(f"warm start objective must be 'likelihood' or 'uniform', got {objective!r}")
    observations, candidates, chosen = random_transcript(env_config, transitions, seed)
    params = [p for n, p in agent.named_parameters() if p.requires_grad and not n.startswith("critic.")]
    optimizer = torch.optim.Adam(params, lr=lr)
    generator = torch.Generator().manual_seed(seed)
    first = last = float("nan")
    for step in range(steps):
        rows = torch.randint(len(observations), (batch_size,), generator=generator).tolist()
        batch = agent.encode([observations[i] for i in rows], [candidates[i] for i in rows])
        out = agent(batch, with_critic=False)
        if objective == "uniform":
            log_pi = out.log_pi.masked_fill(~out.mask, 0.0)
            loss = -(log_pi.sum(-1) / out.mask.sum(-1)).mean()
        else:
            picked = torch.tensor([chosen[i] for i in rows], device=out.action_log_likelihood.device)
            loss = -out.action_log_likelihood.gather(1, picked[:, None]).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        first = loss.item() if step == 0 else first
        last = loss.item()
    optimizer.zero_grad(set_to_none=True)
    return {"warm_start/first_loss": first, "warm_start/last_loss": last}
