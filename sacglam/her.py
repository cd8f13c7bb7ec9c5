"""Hindsight relabeling with the social partner's goals (paper section 2.3, appendix E), as a pure
function of an episode.

Semantic choices, each deliberate:
- **Goals**: only those the social partner reported (`episode.achieved_goals`). It reports train
  goals only, each at the first step it was achieved, so a relabeled reward is exactly what the
  environment would have paid for that goal (tests replay the episode to check it) and held-out
  test goals never leak into training. A goal reported again later keeps only its first step.
- **Strategy**: the paper's `future` strategy. A goal reported at step k relabels steps 0..k:
  every one of those transitions sees a goal achieved at or after it. Reward 0 at steps < k, 1 at
  step k, and the relabeled episode terminates at k (no bootstrap beyond it).
- **The episode's own goal is skipped**: the environment's transitions already carry it.
- **Cap**: `max_goals` keeps a uniform random subset (without replacement) when an episode
  reports more goals (a 30-step episode can report hundreds of sequential goals); None keeps all.
- **Filter**: `goal_filter(episode_goal, relabel_goal)` can drop goals (e.g. appendix G's
  "aligned" filter); None keeps all.
Relabels are returned in step order; they reference the episode's states, never copy them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sacglam.types import Episode, Relabel


def hindsight_relabels(
    episode: Episode,
    max_goals: int | None = None,
    rng: np.random.Generator | None = None,
    goal_filter: Callable[[str, str], bool] | None = None,
) -> list[Relabel]:
    """The hindsight goals of `episode` (see the module docstring)."""
    relabels: list[Relabel] = []
    seen = {episode.goal}
    for step, goals in enumerate(episode.achieved_goals):
        for goal in goals:
            # A goal reported again (an environment that does not go through the protocol guard)
            # keeps its first step: a later one would pay a reward for a goal already achieved.
            if goal in seen or (goal_filter is not None and not goal_filter(episode.goal, goal)):
                continue
            seen.add(goal)
            relabels.append(Relabel(goal=goal, length=step + 1))
    if max_goals is not None and len(relabels) > max_goals:
        if rng is None:
            raise ValueError("max_goals needs an rng to choose the goals it keeps")
        keep = np.sort(rng.choice(len(relabels), size=max_goals, replace=False))
        relabels = [relabels[i] for i in keep]
    return relabels
