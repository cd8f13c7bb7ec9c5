"""Progress bars that never pass their total."""

from __future__ import annotations

from tqdm.auto import tqdm


def advance(bar: tqdm, steps: int) -> None:
    """Advance `bar` by `steps`, stopping at its total: collection runs in whole chunks (PPO in
    whole rollouts), so the last one can go past `total_env_steps`; the bar shows the budget."""
    if bar.total is not None:
        steps = max(0, min(steps, bar.total - bar.n))
    bar.update(steps)
