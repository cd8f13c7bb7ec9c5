"""Q-critic heads on the LLM's hidden states (paper section 2.2 and appendix B)."""

from __future__ import annotations

import torch
from torch import nn

from sacglam.models.standardise import RunningStandardiser

ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "sigmoid": nn.Sigmoid}


def mlp(in_features: int, hidden: int, out_features: int, activation: str = "relu") -> nn.Sequential:
    """Two hidden layers with `activation` (the paper's critic: 1024 units each, ReLU)."""
    act = ACTIVATIONS[activation]
    return nn.Sequential(
        nn.Linear(in_features, hidden), act(), nn.Linear(hidden, hidden), act(), nn.Linear(hidden, out_features)
    )


class StandardisedInput(nn.Module):
    """A head's optional input standardisation (`RunningStandardiser`, shared by its MLPs)."""

    def __init__(self, hidden_size: int, standardise: bool):
        super().__init__()
        self.input_norm = RunningStandardiser(hidden_size) if standardise else None
        # The critic's own top blocks (`agent.critic_weights: own`, set by the agent), whose last
        # hidden states it reads; None: it reads the policy's LLM.
        self.tower: nn.Module | None = None

    def standardised(self, features: torch.Tensor) -> torch.Tensor:
        return features if self.input_norm is None else self.input_norm(features)


class ActionCritic(StandardisedInput):
    """Q(s, a) from the hidden state of the (prompt, action) pair: one output per pair. The paper's
    best variant: the LLM encodes the action with the prompt. `n_critics` independent MLPs (twin
    critics with 2; the paper uses 1), reading the same features, standardised first with
    `standardise` (pre-trained features: `sacglam.models.standardise`)."""

    def __init__(self, hidden_size: int, width: int = 1024, n_critics: int = 1, standardise: bool = False):
        super().__init__(hidden_size, standardise)
        self.nets = nn.ModuleList(mlp(hidden_size, width, 1) for _ in range(n_critics))

    def forward(self, candidate_features: torch.Tensor) -> torch.Tensor:
        """(N, H) -> (n_critics, N)"""
        features = self.standardised(candidate_features)
        return torch.stack([net(features).squeeze(-1) for net in self.nets])


class ObservationCritic(StandardisedInput):
    """Q(s, .) from the prompt's hidden state: |A| outputs, one per candidate slot (DQN-style;
    the paper's ablation). Candidate k of a state takes output k. `standardise`: as ActionCritic's."""

    def __init__(
        self, hidden_size: int, max_actions: int, width: int = 1024, n_critics: int = 1, standardise: bool = False
    ):
        super().__init__(hidden_size, standardise)
        self.max_actions = max_actions
        self.nets = nn.ModuleList(mlp(hidden_size, width, max_actions) for _ in range(n_critics))

    def forward(self, prompt_features: torch.Tensor) -> torch.Tensor:
        """(B, H) -> (n_critics, B, max_actions)"""
        features = self.standardised(prompt_features)
        return torch.stack([net(features) for net in self.nets])


class ValueHead(StandardisedInput):
    """V(s) from the prompt's hidden state (PPO-GLAM's value function; lamorel's has sigmoid
    hidden layers, `activation="sigmoid"`). `standardise`: as ActionCritic's."""

    def __init__(self, hidden_size: int, width: int = 1024, activation: str = "relu", standardise: bool = False):
        super().__init__(hidden_size, standardise)
        self.net = mlp(hidden_size, width, 1, activation)

    def forward(self, prompt_features: torch.Tensor) -> torch.Tensor:
        """(B, H) -> (B,)"""
        return self.net(self.standardised(prompt_features)).squeeze(-1)
