"""Walker's alias table: O(n) to build from n weights, O(1) per draw (`GoalPlan.draw`)."""

from __future__ import annotations

from collections.abc import Sequence


def alias_table(probabilities: Sequence[float]) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """(accept, alias) for `probabilities` (n >= 1 non-negative values, normalised here): column i
    keeps i with probability accept[i] and gives alias[i] otherwise, so that every i ends up with
    probability probabilities[i] / sum (Vose's construction)."""
    n = len(probabilities)
    total = float(sum(probabilities))
    if n == 0 or total <= 0 or min(probabilities) < 0:
        raise ValueError(
            f"alias_table needs at least one weight, all >= 0 and not all 0; got {list(probabilities)[:8]}"
        )
    scaled = [p * n / total for p in probabilities]
    accept, alias = [1.0] * n, list(range(n))
    small = [i for i, p in enumerate(scaled) if p < 1.0]
    large = [i for i, p in enumerate(scaled) if p >= 1.0]
    while small and large:
        s, g = small.pop(), large.pop()
        accept[s], alias[s] = scaled[s], g
        scaled[g] -= 1.0 - scaled[s]
        (small if scaled[g] < 1.0 else large).append(g)
    # Whatever is left holds (up to rounding) exactly one column's mass: keep it whole.
    return tuple(accept), tuple(alias)
