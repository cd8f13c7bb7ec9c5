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
    otherwise it samples with its own seeded generator, so evaluations are reproducible."""

    def __init__(self, agent: GLAMAgent, greedy: bool = False, seed: int = 0):
        self.agent, self.greedy = agent, greedy
        self.name = f"{agent.config.model} ({'greedy' if greedy else 'sampled'})"
        self._generator = torch.Generator().manual_seed(seed)

    def act(self, observations: Sequence[str], candidates: Sequence[Sequence[str]]) -> list[str]:
        with torch.inference_mode():
            out = self.agent(self.agent.encode(observations, candidates), with_critic=False)
        probs = out.probs.float().cpu()
        if self.greedy:
            picks = probs.argmax(-1)
        else:
            picks = torch.multinomial(probs, 1, generator=self._generator).squeeze(-1)
        return [c[i] for c, i in zip(candidates, picks.tolist(), strict=True)]


def run_agent_part(agent: GLAMAgent, part: EvaluationPart) -> list[EpisodeResult]:
    """One part of a run's evaluation with the agent acting: sampling with the part's own seeded
    generator, or greedy."""
    return run_part(LLMPolicy(agent, greedy=part.mode == "greedy", seed=part.seed), part)


def evaluate_agent(agent: GLAMAgent, cfg: TrainConfig) -> dict[str, float]:
    """`eval/<goal set>/<sampled|greedy>/<goal type>`: the run's evaluation
    (`evaluation.training_evaluation`) of `agent`, in this process."""
    return run_evaluation(training_evaluation(cfg), lambda part: run_agent_part(agent, part))
