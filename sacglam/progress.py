"""Progress bars that never pass their total, and that keep a log file readable."""

from __future__ import annotations

import sys

from tqdm.auto import tqdm

LOG_FILE_INTERVAL_S = 30.0  # seconds between a bar's updates when stderr is a file or a pipe, not a terminal


def to_terminal() -> bool:
    """Whether stderr (where bars go) is shown live: a terminal, or a notebook (whose bars are
    widgets). A log file gets no transient bars (an evaluation's inside a run, which a terminal
    redraws in place and a file keeps as escape codes) and other bars at most every
    `LOG_FILE_INTERVAL_S`."""
    return sys.stderr.isatty() or "ipykernel" in sys.modules


def bar_interval() -> dict[str, float]:
    """tqdm's `mininterval` for a lasting bar (a run's, `sacglam evaluate`'s): its default when
    shown live, `LOG_FILE_INTERVAL_S` in a file."""
    return {} if to_terminal() else {"mininterval": LOG_FILE_INTERVAL_S}


def advance(bar: tqdm, steps: int) -> None:
    """Advance `bar` by `steps`, stopping at its total: collection runs in whole chunks (PPO in
    whole rollouts), so the last one can go past `total_env_steps`; the bar shows the budget."""
    if bar.total is not None:
        steps = max(0, min(steps, bar.total - bar.n))
    bar.update(steps)
