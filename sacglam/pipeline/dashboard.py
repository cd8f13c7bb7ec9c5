"""Run metrics in the Ray dashboard: every figure the run logs becomes a `ray.util.metrics`
gauge (`loss/critic` -> `sacglam_loss_critic`, tagged with the run name), plus counters of
environment steps and episodes. The dashboard's Metrics view (Prometheus/Grafana) shows them."""

from __future__ import annotations

import re
from typing import Any

_INVALID = re.compile(r"[^a-zA-Z0-9_]")


def metric_name(name: str) -> str:
    """A valid Prometheus name for a logged figure: `eval/simple-train/sampled/all` ->
    `sacglam_eval_simple_train_sampled_all`."""
    return "sacglam_" + _INVALID.sub("_", name).strip("_")


class RayDashboardMetrics:
    """Gauges created on first use. Only in a process connected to Ray."""

    def __init__(self, run: str):
        from ray.util import metrics

        self._metrics, self.run = metrics, run
        self._gauges: dict[str, Any] = {}
        self.env_steps = metrics.Counter("sacglam_env_steps", description="Environment steps taken", tag_keys=("run",))
        self.env_steps.set_default_tags({"run": run})
        self.episodes = metrics.Counter("sacglam_episodes", description="Episodes finished", tag_keys=("run",))
        self.episodes.set_default_tags({"run": run})

    def record(self, values: dict[str, float]) -> None:
        for name, value in values.items():
            if not isinstance(value, (int, float)):
                continue
            key = metric_name(name)
            if key not in self._gauges:
                gauge = self._metrics.Gauge(key, description=name, tag_keys=("run",))
                gauge.set_default_tags({"run": self.run})
                self._gauges[key] = gauge
            self._gauges[key].set(float(value))

    def count(self, env_steps: int, episodes: int) -> None:
        if env_steps:
            self.env_steps.inc(env_steps)
        if episodes:
            self.episodes.inc(episodes)
