"""Language warm start for random-initialised models (docs/explanation/algorithms.md, "Language warm start").

A random-initialised LM gives every token about the same log-probability, so a 4-token action
scores about 4x lower than a 1-token one: its initial policy almost never picks a `Go to` action
and cannot explore. The warm start trains the LM on states of a uniform-random transcript of the
environment (no reward, no goal information) until its policy over each state's candidates is
close to uniform, measured on the transcript's states (`exploration_measure`), or until its step
cap. It is a deviation from the paper (whose actor is pre-trained): apply it to every compared
method alike, and not to pre-trained models.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from sacglam.config import AgentConfig, EnvConfig
from sacglam.models.agent import GLAMAgent

CHECK_EVERY = 10  # warm-start steps between two measurements of the policy against its target
CHECK_STATES = 256  # transcript states the measurement reads (spread over the transcript)


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


@dataclass(frozen=True)
class ExplorationMeasure:
    """How far a policy is from uniform over the candidates, averaged over states."""

    kl_to_uniform: float
    """Mean over states of KL(uniform || pi) = -log K - mean_a log pi(a|s), in nats: 0 for the
    uniform policy; it grows without bound as any candidate's probability goes to 0, so it
    measures what exploration needs (every candidate gets tried)."""
    largest_probability: float
    """Mean over states of max_a pi(a|s) (1/K for the uniform policy, 1 for a deterministic one)."""
    uniform_largest_probability: float
    """The same for the uniform policy: the mean of 1/K over the states."""


def exploration_measure(
    agent: GLAMAgent, observations: Sequence[str], candidates: Sequence[Sequence[str]], batch_size: int = 64
) -> ExplorationMeasure:
    """`ExplorationMeasure` of the agent's policy on these states (no gradient)."""
    kl, largest, uniform, count = 0.0, 0.0, 0.0, len(observations)
    with torch.no_grad():
        for start in range(0, count, batch_size):
            out = agent(
                agent.encode(observations[start : start + batch_size], candidates[start : start + batch_size]),
                with_critic=False,
            )
            k = out.mask.sum(-1).float()  # (B,)
            mean_log_pi = out.log_pi.masked_fill(~out.mask, 0.0).sum(-1) / k
            kl += float((-torch.log(k) - mean_log_pi).sum())
            largest += float(out.log_pi.exp().max(-1).values.sum())
            uniform += float((1.0 / k).sum())
    return ExplorationMeasure(kl / count, largest / count, uniform / count)


def has_prefix_candidates(candidates: Sequence[str]) -> bool:
    """Whether one candidate is a word-prefix of another (`Look` of `Look at the bench`)."""
    return any(b.startswith(a + " ") for a in candidates for b in candidates)


def language_warm_start(
    agent: GLAMAgent,
    env_config: EnvConfig,
    steps: int = 300,
    transitions: int = 2000,
    batch_size: int = 64,
    lr: float = 1e-3,
    seed: int = 0,
    objective: Literal["uniform", "likelihood"] = "uniform",
    target_kl: float | None = None,
) -> dict[str, float]:
    """Train the LLM (not the critic) on states of a uniform-random transcript for at most `steps`
    steps, stopping early once the policy's mean KL(uniform || pi) over `CHECK_STATES` of the
    transcript's states is at most `target_kl` (measured every `CHECK_EVERY` steps; None: all
    `steps`). Returns the first and last loss, the steps taken, and the final `ExplorationMeasure`.

    `likelihood`: maximise log P_LLM(a|s) of the uniformly chosen actions (next-token likelihood of
    their tokens). `uniform`: minimise the cross-entropy from the uniform policy, -mean_a log
    pi(a|s) over each state's candidates, which is zero-gradient once the policy is uniform. Both
    remove the short-action bias; the likelihood objective also drives the hidden state at the
    action tokens towards one that ignores the prompt (the best next-token prediction of a random
    action is the same in every state), which leaves a critic reading that state unable to tell
    goals apart (docs/results/sanity.md); the uniform objective asks for no more than the policy."""
    if objective not in ("likelihood", "uniform"):
        raise ValueError(f"warm start objective must be 'likelihood' or 'uniform', got {objective!r}")
    observations, candidates, chosen = random_transcript(env_config, transitions, seed)
    stride = max(1, len(observations) // CHECK_STATES)
    check = (observations[::stride][:CHECK_STATES], candidates[::stride][:CHECK_STATES])
    params = [p for n, p in agent.named_parameters() if p.requires_grad and not n.startswith("critic.")]
    optimizer = torch.optim.Adam(params, lr=lr)
    generator = torch.Generator().manual_seed(seed)
    first = last = float("nan")
    taken, measured_at = 0, 0
    measure = exploration_measure(agent, *check) if target_kl is not None else None
    while taken < steps and not (measure is not None and target_kl is not None and measure.kl_to_uniform <= target_kl):
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
        first = loss.item() if taken == 0 else first
        last = loss.item()
        taken += 1
        if target_kl is not None and taken % CHECK_EVERY == 0:
            measure, measured_at = exploration_measure(agent, *check), taken
    optimizer.zero_grad(set_to_none=True)
    agent.reset_critic_tower()  # a critic with its own blocks starts as a copy of the warm-started ones
    if measure is None or measured_at != taken:
        measure = exploration_measure(agent, *check)
    losses = {"warm_start/first_loss": first, "warm_start/last_loss": last} if taken else {}  # no step: no loss
    return losses | {
        "warm_start/steps": float(taken),
        "warm_start/prefix_states": sum(map(has_prefix_candidates, check[1])) / len(check[1]),
        "warm_start/kl_to_uniform": measure.kl_to_uniform,
        "warm_start/largest_probability": measure.largest_probability,
        "warm_start/uniform_largest_probability": measure.uniform_largest_probability,
    }


def warm_start_line(metrics: dict[str, float], target_kl: float | None, agent: AgentConfig) -> str | None:
    """The one line a run prints after its warm start (`language_warm_start`'s metrics; None when
    none ran): the measure, and, when the policy ended still far from uniform (above
    `target_kl`, or, without a target, a largest probability over twice the uniform policy's), a
    warning naming the likely cause: LoRA on a random-initialised model cannot reshape its output;
    without an end-of-action token an action that is a prefix of another (on some of the measured
    states) outscores it; otherwise the step cap was too small."""
    if "warm_start/kl_to_uniform" not in metrics:
        return None
    kl, largest = metrics["warm_start/kl_to_uniform"], metrics["warm_start/largest_probability"]
    uniform = metrics["warm_start/uniform_largest_probability"]
    steps = int(metrics["warm_start/steps"])
    measure = (
        f"mean KL(uniform || pi) {kl:.3g} nats, {f'target {target_kl}' if target_kl is not None else 'no target'}; "
        f"largest probability {largest:.2f} on average, uniform {uniform:.2f}"
    )
    if target_kl is not None and kl <= target_kl:
        return f"warm start: {steps} steps; the untrained policy is near uniform on random play's states ({measure})"
    if target_kl is None and largest <= 2 * uniform:  # a fixed step count: only the looser bound was asked for
        return (
            f"warm start: {steps} steps; the untrained policy puts at most twice the uniform probability on "
            f"its favourite action on random play's states ({measure})"
        )
    if agent.random_initialised and agent.lora_rank > 0:
        fix = "agent.lora_r is set on a random-initialised model, whose frozen random weights LoRA cannot reshape: unset it (0: every weight trains)"
    elif not agent.scores_end_of_action and metrics.get("warm_start/prefix_states", 0) > 0:
        fix = "agent.end_of_action is off and some candidates are prefixes of others, which then outscore them: turn it on"
    else:
        fix = "raise warm_start_steps"
    return (
        f"warning: after {steps} warm-start steps the untrained policy is still far from uniform on random play's "
        f"states ({measure}): it will hardly explore; {fix}"
    )
