"""Progress bars that never pass their total, and that keep a log file readable."""

from __future__ import annotations

import sys

from tqdm.auto import tqdm

LOG_FILE_INTERVAL_S = 30.0  # seconds between a bar's updates when stderr is a file or a pipe, not a terminal


def to_terminal() -> bool:
    """Whether stderr (where bars go) is a terminal: a log file gets no transient bars (an
    evaluation's, which a terminal redraws in place and a file keeps as escape codes) and the
    run's own bar at most every `LOG_FILE_INTERVAL_S`."""
    return sys.stderr.isatty()


def bar_interval() -> dict[str, float]:
    """tqdm's `mininterval` for a run's bar: its default on a terminal, `LOG_FILE_INTERVAL_S` in a file."""
    return {} if to_terminal() else {"mininterval": LOG_FILE_INTERVAL_S}


def advance(bar: tqdm, steps: int) -> None:
    """Advance `bar` by `steps`, stopping at its total: collection runs in whole chunks (PPO in
    whole rollouts), so the last one can go past `total_env_steps`; the bar shows the budget."""
    if bar.total is not None:
        steps = max(0, min(steps, bar.total - bar.n))
    bar.update(steps)
