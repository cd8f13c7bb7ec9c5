"""A competence estimator that generalises across goal texts (the idea of MAGELLAN, Gaven et
al. 2025; this design is ours).

Per-goal outcome windows need a handful of episodes on every goal before they say anything, which
does not scale to thousands of goals. Here a small MLP head reads a goal's features (the agent's
LLM's hidden state at the end of the prompt `Goal: <goal>`, computed once per goal, when it is
discovered, by the inference side) and predicts the probability that an episode on that goal
succeeds. It is trained online, with binary cross-entropy, on the newest `memory` (goal, outcome)
pairs, so it follows the agent's recent competence. Learning progress of any goal is the change
of its prediction over a horizon, |c_now(g) - c_then(g)|, where c_then is the head as it was about
`horizon` outcomes ago (a stored snapshot): a goal never tried inherits the progress of goals
whose features are close to its own.

Features are centred on the running mean over the discovered goals and scaled by one number,
their root-mean-square spread (LLM hidden states share a large common component: without
centring every goal would look alike to the head; a per-dimension scale would blow up dimensions
that hold only noise).
"""

from __future__ import annotations

import copy
from collections import deque

import numpy as np
import torch
from torch import nn

BATCH = 64  # outcomes per gradient step
OUTCOMES_PER_STEP = 1  # gradient steps follow the outcomes one for one
SNAPSHOTS = 4  # snapshots per horizon: c_then is between horizon and horizon * (1 + 1/SNAPSHOTS) old


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
        self._raw = torch.zeros(64, features_dim)  # rows 0..n-1 hold the goals' raw features (capacity doubles)
        self._sum = torch.zeros(features_dim, dtype=torch.float64)
        self._sum_sq = torch.zeros(features_dim, dtype=torch.float64)
        self.memory: deque[tuple[int, int]] = deque(maxlen=memory)  # (goal row, outcome)
        self.outcomes = 0
        self.snapshots: deque[dict[str, torch.Tensor]] = deque(maxlen=SNAPSHOTS + 1)
        self._owed = 0.0

    def knows(self, goal: str) -> bool:
        return goal in self.goal_rows

    def add_features(self, goals: list[str], features: np.ndarray) -> None:
        """Raw features (len(goals), d) of goals not seen before (others are ignored)."""
        new = [(g, f) for g, f in zip(goals, features, strict=True) if g not in self.goal_rows]
        if not new:
            return
        rows = torch.as_tensor(np.stack([f for _, f in new]), dtype=torch.float32)
        n = len(self.goal_rows)
        while n + len(new) > len(self._raw):
            self._raw = torch.cat([self._raw, torch.zeros_like(self._raw)])
        self._raw[n : n + len(new)] = rows
        for i, (goal, _) in enumerate(new):
            self.goal_rows[goal] = n + i
        self._sum += rows.double().sum(0)
        self._sum_sq += rows.double().square().sum(0)

    def _inputs(self, rows: list[int]) -> torch.Tensor:
        """(len(rows), d) centred features with a mean squared entry of 1 over the discovered goals."""
        n = len(self.goal_rows)
        mean = self._sum / n
        spread = (self._sum_sq / n - mean.square()).clamp_min(0).mean().sqrt().clamp_min(1e-6)
        return ((self._raw[rows].double() - mean) / spread).float()

    def observe(self, outcomes: list[tuple[str, bool]]) -> None:
        """Train on new outcomes of goals with features: one Adam step of BATCH outcomes drawn
        from memory per OUTCOMES_PER_STEP new ones; a snapshot every horizon / SNAPSHOTS."""
        every = max(1, self.horizon // SNAPSHOTS)
        for goal, success in outcomes:
            self.memory.append((self.goal_rows[goal], int(success)))
            self.outcomes += 1
            if self.outcomes % every == 0:
                self.snapshots.append(copy.deepcopy(self.head.state_dict()))
            self._owed += 1 / OUTCOMES_PER_STEP
        while self._owed >= 1 and self.memory:
            self._owed -= 1
            picks = self.rng.integers(len(self.memory), size=min(BATCH, len(self.memory)))
            rows, targets = zip(*(self.memory[int(i)] for i in picks), strict=True)
            logits = self.head(self._inputs(list(rows))).squeeze(1)
            loss = nn.functional.binary_cross_entropy_with_logits(logits, torch.tensor(targets, dtype=torch.float32))
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()

    @torch.no_grad()
    def progress(self, goals: list[str]) -> np.ndarray | None:
        """(len(goals),) |c_now - c_then| with c_then the oldest snapshot (about `horizon`
        outcomes old once all are held, younger before); None before the first snapshot."""
        if not self.snapshots:
            return None
        then = copy.deepcopy(self.head)
        then.load_state_dict(self.snapshots[0])
        x = self._inputs([self.goal_rows[g] for g in goals])
        return (torch.sigmoid(self.head(x)) - torch.sigmoid(then(x))).abs().squeeze(1).numpy()
