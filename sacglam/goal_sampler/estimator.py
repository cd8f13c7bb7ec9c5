"""A competence estimator that generalises across goal texts (the idea of MAGELLAN, Gaven et
al. 2025; this design is ours).

Per-goal outcome windows need a handful of episodes on every goal before they say anything, which
does not scale to thousands of goals. Here a small MLP head reads a goal's features (the agent's
LLM's feature of the prompt `Goal: <goal>`, given once per goal by the inference side) and predicts
the probability that an episode on that goal succeeds. It is trained online, with binary
cross-entropy, on the agent's own (goal, outcome) pairs. Learning progress of any goal is the
change of its prediction over a horizon, |c_now(g) - c_then(g)|, where c_then is the head as it
was `horizon` outcomes ago (a stored snapshot): a goal never tried inherits the progress of goals
whose features are close to its own.
"""

from __future__ import annotations

import copy
import math
from collections import deque

import numpy as np
import torch
from torch import nn

BATCH = 64  # outcomes per gradient step
OUTCOMES_PER_STEP = 4  # one gradient step per this many new outcomes


def _unit_rows(features: torch.Tensor) -> torch.Tensor:
    """(N, d) -> rows rescaled to norm sqrt(d): entries of order 1 whatever the LLM's scale."""
    return features * (math.sqrt(features.shape[1]) / features.norm(dim=1, keepdim=True).clamp_min(1e-8))


class CompetenceEstimator:
    """`features_dim`: d of the goal features; `memory`: the newest outcomes trained on."""

    def __init__(self, features_dim: int, hidden: int, lr: float, horizon: int, memory: int, seed: int):
        if min(features_dim, hidden, horizon, memory) < 1 or lr <= 0:
            raise ValueError("features_dim, hidden, horizon and memory must be >= 1 and lr > 0")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.head = nn.Sequential(nn.Linear(features_dim, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        self.optimizer = torch.optim.Adam(self.head.parameters(), lr=lr)
        self.horizon = horizon
        self.rng = np.random.default_rng([seed, 0xC0DE])
        self.goal_rows: dict[str, int] = {}
        self.features = torch.zeros(0, features_dim)
        self.memory: deque[tuple[int, int]] = deque(maxlen=memory)  # (goal row, outcome)
        self.outcomes = 0
        self.snapshots: deque[dict[str, torch.Tensor]] = deque(maxlen=3)  # every horizon/2 outcomes
        self._owed = 0.0

    def knows(self, goal: str) -> bool:
        return goal in self.goal_rows

    def add_features(self, goals: list[str], features: np.ndarray) -> None:
        """Features (len(goals), d) of goals not seen before (others are ignored)."""
        new = [(g, f) for g, f in zip(goals, features, strict=True) if g not in self.goal_rows]
        if not new:
            return
        for g, _ in new:
            self.goal_rows[g] = len(self.goal_rows)
        rows = torch.as_tensor(np.stack([f for _, f in new]), dtype=torch.float32)
        self.features = torch.cat([self.features, _unit_rows(rows)])

    def observe(self, outcomes: list[tuple[str, bool]]) -> None:
        """Train on new outcomes (goals without features are skipped): one Adam step of BATCH
        outcomes drawn from memory per OUTCOMES_PER_STEP new ones; a snapshot every horizon/2."""
        for goal, success in outcomes:
            row = self.goal_rows.get(goal)
            if row is None:
                continue
            self.memory.append((row, int(success)))
            self.outcomes += 1
            if self.outcomes % max(1, self.horizon // 2) == 0:
                self.snapshots.append(copy.deepcopy(self.head.state_dict()))
            self._owed += 1 / OUTCOMES_PER_STEP
        while self._owed >= 1 and self.memory:
            self._owed -= 1
            picks = self.rng.integers(len(self.memory), size=min(BATCH, len(self.memory)))
            rows, targets = zip(*(self.memory[int(i)] for i in picks), strict=True)
            logits = self.head(self.features[list(rows)]).squeeze(1)
            loss = nn.functional.binary_cross_entropy_with_logits(logits, torch.tensor(targets, dtype=torch.float32))
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()

    @torch.no_grad()
    def competence(self, goals: list[str]) -> np.ndarray:
        """(len(goals),) predicted success probabilities (goals must have features)."""
        return torch.sigmoid(self.head(self.features[[self.goal_rows[g] for g in goals]])).squeeze(1).numpy()

    @torch.no_grad()
    def progress(self, goals: list[str]) -> np.ndarray | None:
        """(len(goals),) |c_now - c_then| with c_then the oldest snapshot (about `horizon`
        outcomes old once three are held); None before the first snapshot."""
        if not self.snapshots:
            return None
        then = copy.deepcopy(self.head)
        then.load_state_dict(self.snapshots[0])
        x = self.features[[self.goal_rows[g] for g in goals]]
        return (torch.sigmoid(self.head(x)) - torch.sigmoid(then(x))).abs().squeeze(1).numpy()
