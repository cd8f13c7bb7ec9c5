"""One place metrics go: a JSONL file (every record), a CSV file (wide, one row per record) and
TensorBoard event files, written in a local directory and, when the run's storage is elsewhere (a
URI), uploaded there by `sync` (at each checkpoint and at the end)."""

from __future__ import annotations

import csv
import json
import math
import os
import shlex
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tensorboardX import SummaryWriter

from sacglam.report import METRICS_FILE, read_metrics
from sacglam.runtime.storage import StoragePath, upload_dir

Listener = Callable[[int, dict[str, Any]], None]
_LISTENERS: list[Listener] = []


@contextmanager
def metrics_listener(listener: Listener) -> Iterator[None]:
    """Within the block, every record any `MetricsLogger` of this process logs is also passed to
    `listener(env_steps, values)` (how a Ray Tune trial reports what the run logs)."""
    _LISTENERS.append(listener)
    try:
        yield
    finally:
        _LISTENERS.remove(listener)


TENSORBOARD_DIR = "tensorboard"


def tensorboard_command(directory: str | Path) -> str:
    """The command that serves the TensorBoard event files a `MetricsLogger` writes in
    `directory` (live: TensorBoard re-reads them as the run appends): the `tensorboard` installed
    beside this Python when there is one (`make` installs it in .venv), else the one on PATH."""
    beside = Path(sys.executable).parent / "tensorboard"
    program = _shortest(beside) if beside.exists() else "tensorboard"
    return f"{shlex.quote(program)} --logdir {shlex.quote(_shortest(Path(directory) / TENSORBOARD_DIR))}"


def _shortest(path: Path) -> str:
    """`path` relative to the working directory when it lies under it, else absolute."""
    absolute = path.absolute()
    try:
        return str(absolute.relative_to(Path.cwd()))
    except ValueError:
        return os.fspath(absolute)


class MetricsLogger:
    """`log(step, {name: value})` appends to `metrics.jsonl`, `metrics.csv` and TensorBoard.

    `keep_until` (a resumed run): records of earlier sessions past that env step are dropped
    from the JSONL and CSV files, so the resumed run's records replace them. `mirror`: the run's
    storage when it is not `directory` itself.
    """

    def __init__(self, directory: str | Path, keep_until: int | None = None, mirror: StoragePath | None = None):
        self.directory, self.mirror = Path(directory), mirror
        self.directory.mkdir(parents=True, exist_ok=True)
        jsonl = self.directory / METRICS_FILE
        self._rows: list[dict[str, Any]] = []
        if keep_until is not None and jsonl.exists():
            self._rows = [r for r in read_metrics(self.directory) if r["env_steps"] <= keep_until]
            jsonl.write_text("".join(json.dumps(r) + "\n" for r in self._rows))
        self._jsonl = jsonl.open("a")
        self._csv_path = self.directory / "metrics.csv"
        self._columns: list[str] | None = None
        self._column_set: set[str] = set()
        # flushed every 2 s by the writer's thread: a TensorBoard reading the run live sees each record
        # within seconds (tensorboardX's default is 2 minutes)
        self._tensorboard = SummaryWriter(str(self.directory / TENSORBOARD_DIR), flush_secs=2)

    def log(self, env_steps: int, values: dict[str, Any]) -> None:
        record = {"env_steps": env_steps, **values}
        self._jsonl.write(json.dumps(record) + "\n")
        self._jsonl.flush()
        self._rows.append(record)
        for name, value in values.items():
            if isinstance(value, (int, float)) and math.isfinite(value):
                self._tensorboard.add_scalar(name, value, env_steps)
        self._write_csv()
        for listener in list(_LISTENERS):
            listener(env_steps, values)

    def _write_csv(self) -> None:
        # Columns are the union of every key seen so far, in order of first appearance; the file is
        # rewritten only when a record brings a new one (the first records of a run), else the record
        # is appended: a log costs the same at the run's end as at its start.
        if self._columns is None:  # the first write of this session: the kept records' columns
            self._columns = list(dict.fromkeys(k for row in self._rows for k in row))
            new, rows, mode = self._columns, self._rows, "w"
        else:
            new = [k for k in self._rows[-1] if k not in self._column_set]
            self._columns.extend(new)
            rows, mode = (self._rows, "w") if new else (self._rows[-1:], "a")
        self._column_set.update(new)
        with self._csv_path.open(mode, newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self._columns)
            if mode == "w":
                writer.writeheader()
            writer.writerows(rows)

    def sync(self) -> None:
        """Copy the files to the run's storage (nothing to do when they are written there)."""
        if self.mirror is not None:
            self._tensorboard.flush()
            upload_dir(self.directory, self.mirror)

    def close(self) -> None:
        self._jsonl.close()
        self._tensorboard.close()
        self.sync()
