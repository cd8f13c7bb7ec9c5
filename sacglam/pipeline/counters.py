"""The driver's progress counters: what a checkpoint's `driver.json` holds and `--resume` restores."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Counters:
    """The driver's progress: saved in every checkpoint, restored by `--resume`."""

    env_steps: int = 0
    episodes: int = 0  # training episodes finished
    successes: int = 0  # of which successful
    updates: int = 0  # learner updates finished
    learning_from: int | None = None  # env step at which updates started
    published: int = -1  # newest weights version sent to inference
    train_seconds: float = 0.0  # wall time outside evaluation and checkpoints
    next_eval: int = 0
    next_log: int = 0
    next_checkpoint: int = 0
    recent: list[tuple[int, int]] = field(default_factory=list)  # (episodes, successes) of recent chunks
    train_metrics: dict[str, float] = field(default_factory=dict)  # of the last training call (logged until the next)
    plan_version: int = 0  # the goal sampler's newest plan version the driver knows of
    plan_sent: list[int] = field(default_factory=list)  # per rollout worker: the plan version it was sent
    discarded_env_steps: int = 0  # collected with stale weights and dropped (on-policy schedule)
    learning_signals: int = 0  # rewarded steps collected, plus partner reports when relabeling uses them
    no_signal_at: int | None = None  # env step at which the run was found to have no learning signal yet
    reported_goals: int = 0  # goals the partner reported, summed over chunks (each chunk's distinct ones)
    no_report_at: int | None = None  # env step at which a relabeling run was found to have no report to relabel with
    held_out_reported_at: int | None = None  # env step at which a held-out goal was first reported in training
    finished: bool = False  # set in the final checkpoint of a run that reached its budget (not stopped before it)
    inference_before: dict[str, float] = field(default_factory=dict)  # inference counters of earlier actor lives


def counters_from_json(saved: dict[str, Any]) -> Counters:
    """A checkpoint's `driver.json` as `Counters`. One written before the learning-signal count
    (or the count of reported goals) existed: whether its run had a signal (a report) is unknown,
    so it counts as having had one (no warning of none on every such resume)."""
    saved = {"learning_signals": saved.get("successes", 0) or 1, "reported_goals": 1, **saved}
    counters = Counters(**saved)
    counters.recent = [(int(e), int(s)) for e, s in counters.recent]
    counters.finished = False  # a restored run is running again (to a larger budget): not finished until it ends
    return counters
