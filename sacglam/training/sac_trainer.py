"""SAC-GLAM(+HER) training. It always goes through the actor-learner pipeline (`sacglam.pipeline`):
`cfg.runner = 'local'` runs every component in this process (the in-process trainer), `'ray'`
runs them as Ray actors. One loop, one set of components, two ways to host them."""

from __future__ import annotations

from sacglam.config import TrainConfig
from sacglam.pipeline.run import run_pipeline


def train_sac(cfg: TrainConfig) -> dict[str, float]:
    """Train, evaluating along the way; returns the last evaluation's figures."""
    return run_pipeline(cfg)
