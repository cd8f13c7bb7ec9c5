"""The inference service (plain class): the LLM agent's policy for batches of states, with
versioned weights. The Ray inference actor wraps it with dynamic micro-batching; the local runner
calls it directly."""

from __future__ import annotations

import random
import threading
from collections.abc import Sequence

import numpy as np
import torch

from sacglam.config import AgentConfig
from sacglam.runtime.accelerator import settle_on_device

Request = tuple[Sequence[str], Sequence[Sequence[str]]]  # (observations, candidates) of one caller


class InferenceServer:
    """pi(.|s) over each state's candidates. `set_weights` stages a learner's trainable state;
    it is applied before the next forward, never during one."""

    def __init__(self, agent_config: AgentConfig, threads: int | None = None, gpu_memory_fraction: float | None = None):
        from sacglam.models.agent import GLAMAgent

        if threads:
            torch.set_num_threads(threads)
        self.agent = GLAMAgent(agent_config).eval()
        settle_on_device("the inference actor", self.agent.device, gpu_memory_fraction)
        self.version = -1  # the weights in use (-1: as built, before any broadcast)
        self._staged: tuple[int, dict[str, torch.Tensor]] | None = None
        self._lock = threading.Lock()  # the Ray actor stages from its event loop while a forward runs in a thread
        self._forward = threading.Lock()  # one forward (and weight load) at a time across threads
        self.forwards = 0
        self.states_scored = 0
        # Which life of the actor the counters are of: a restarted actor counts from 0 again, and
        # the driver, which sums the lives (`InferenceTally`), must see the restart even when the
        # new life has already counted past the old one's last reading.
        self.life = float(random.getrandbits(52))

    def set_weights(self, version: int, state: dict[str, torch.Tensor]) -> int:
        """Stage `state` (from `GLAMAgent.trainable_state_dict`); an older version than the staged
        or current one is ignored. Returns the version that will be used."""
        with self._lock:
            newest = max(self.version, self._staged[0] if self._staged else -1)
            if version > newest:
                self._staged = (version, state)
            return max(version, newest)

    def _apply_staged(self) -> None:
        with self._lock:
            staged, self._staged = self._staged, None
        if staged is not None:
            self.agent.load_trainable_state_dict(staged[1])
            self.version = staged[0]

    def distributions(self, observations: Sequence[str], candidates: Sequence[Sequence[str]]) -> tuple[np.ndarray, int]:
        """(probs (B, C) float32 with 0 at padding, weights version)."""
        return self.distributions_batch([(observations, candidates)])[0]

    def distributions_batch(self, requests: Sequence[Request]) -> list[tuple[np.ndarray, int]]:
        """Several callers' states in one forward; each gets its own rows back (its columns up to
        its own largest candidate count)."""
        observations = [o for obs, _ in requests for o in obs]
        candidates = [c for _, cands in requests for c in cands]
        with self._forward:
            self._apply_staged()
            with torch.inference_mode():
                out = self.agent(self.agent.encode(observations, candidates), with_critic=False)
        probs = out.probs.float().cpu().numpy()
        self.forwards += 1
        self.states_scored += len(observations)
        results, start = [], 0
        for obs, cands in requests:
            width = max(len(c) for c in cands)
            results.append((probs[start : start + len(obs), :width].copy(), self.version))
            start += len(obs)
        return results

    def goal_features(self, goals: Sequence[str]) -> np.ndarray:
        """(len(goals), H) float32: the LLM's hidden state at the end of the prompt `Goal: <goal>`
        (the position whose state the value head reads in a full prompt), under the current
        weights; the goal sampler's competence head reads goals through it. Never concurrent with a policy forward or a weight
        load (the Ray actor runs both in threads)."""
        prompts = [f"Goal: {goal}\n" for goal in goals]
        with self._forward:
            self._apply_staged()
            with torch.inference_mode():
                scores = self.agent.candidate_scores(self.agent.encode(prompts, [[goal] for goal in goals]))
        return scores.prompt_features.float().cpu().numpy()

    def life_and_stats(self) -> tuple[float, dict[str, float]]:
        """(which life of the actor its counters are of, `stats()`)."""
        return self.life, self.stats()

    def stats(self) -> dict[str, float]:
        return {
            "inference/version": self.version,
            "inference/forwards": self.forwards,
            "inference/states_scored": self.states_scored,
            "inference/mean_batch_states": self.states_scored / max(self.forwards, 1),
        }
