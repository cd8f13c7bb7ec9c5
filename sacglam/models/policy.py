"""The LLM agent behind the `Policy` interface: sample from pi(.|s) or take its argmax."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from sacglam.config import TrainConfig
from sacglam.evaluation import EvaluationPart, run_evaluation, run_part, training_evaluation
from sacglam.models.agent import GLAMAgent
from sacglam.types import EpisodeResult


class LLMPolicy:
    """Acts with a `GLAMAgent` (no gradients). `greedy` takes the most probable candidate;
    otherwise it samples with its own seeded generator, so evaluations are reproducible.

    With `measure_critic` and a Q-critic agent, `act_measured` also gives, per state, the
    probability pi puts on the critic's argmax: near 1 when the policy follows its critic, near 0
    when it ignores what the critic ranks first (a collapsed policy). The actions are the same
    with or without it (the critic's forward draws nothing from the generator)."""

    def __init__(self, agent: GLAMAgent, greedy: bool = False, seed: int = 0, measure_critic: bool = False):
        self.agent, self.greedy = agent, greedy
        self.name = f"{agent.config.model} ({'greedy' if greedy else 'sampled'})"
        self._generator = torch.Generator().manual_seed(seed)
        self.measure_critic = measure_critic and agent.config.critic in ("action", "observation")

    def act(self, observations: Sequence[str], candidates: Sequence[Sequence[str]]) -> list[str]:
        return self.act_measured(observations, candidates)[0]

    def act_measured(
        self, observations: Sequence[str], candidates: Sequence[Sequence[str]]
    ) -> tuple[list[str], list[float] | None]:
        with torch.inference_mode():
            out = self.agent(self.agent.encode(observations, candidates), with_critic=self.measure_critic)
        probs = out.probs.float().cpu()
        if self.greedy:
            picks = probs.argmax(-1)
        else:
            picks = torch.multinomial(probs, 1, generator=self._generator).squeeze(-1)
        actions = [c[i] for c, i in zip(candidates, picks.tolist(), strict=True)]
        if out.q is None:
            return actions, None
        q = out.q.float().cpu().masked_fill(~out.mask.cpu(), float("-inf"))
        return actions, probs.gather(1, q.argmax(-1, keepdim=True)).squeeze(1).tolist()


def run_agent_part(agent: GLAMAgent, part: EvaluationPart) -> list[EpisodeResult]:
    """One part of a run's evaluation with the agent acting: sampling with the part's own seeded
    generator, or greedy; each step also measures the probability pi gives the critic's argmax."""
    return run_part(LLMPolicy(agent, greedy=part.mode == "greedy", seed=part.seed, measure_critic=True), part)


def evaluate_agent(agent: GLAMAgent, cfg: TrainConfig) -> dict[str, float]:
    """`eval/<goal set>/<sampled|greedy>/<goal type>`: the run's evaluation
    (`evaluation.training_evaluation`) of `agent`, in this process."""
    return run_evaluation(training_evaluation(cfg), lambda part: run_agent_part(agent, part))
