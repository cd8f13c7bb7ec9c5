"""`StepLatency`: a vector-environment wrapper that makes every environment step take longer, as a
slow engine (a game, a simulator, an LLM-driven partner) would. For benchmarks of latency hiding
by rollout workers; no run uses it unless its config asks (`env.step_latency_ms`)."""

from __future__ import annotations

import time
from typing import Any

from gymnasium.vector import VectorEnv, VectorWrapper


class StepLatency(VectorWrapper):
    """Sleeps `latency_ms` per environment step before each vector step: a vector of N
    environments stepped one after another (as `PlaygroundTextVector` does) takes N x latency_ms
    longer per call. Sleeping holds no CPU, like waiting on an engine in another process."""

    def __init__(self, env: VectorEnv, latency_ms: float):
        if latency_ms < 0:
            raise ValueError(f"latency_ms must be >= 0, got {latency_ms}")
        super().__init__(env)
        self.latency_ms = latency_ms

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        time.sleep(self.latency_ms * self.num_envs / 1000.0)
        return self.env.step(actions)

    # The goal of auto-reset episodes is the wrapped vector's business: pass it through.
    @property
    def goal_source(self) -> Any:
        return self.env.goal_source  # type: ignore[attr-defined]

    @goal_source.setter
    def goal_source(self, source: Any) -> None:
        self.env.goal_source = source  # type: ignore[attr-defined]
