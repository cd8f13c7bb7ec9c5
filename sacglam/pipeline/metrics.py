"""One place metrics go: a JSONL file (every record), a CSV file (wide, one row per record) and
TensorBoard event files, written in a local directory and, when the run's storage is elsewhere (a
URI), uploaded there by `sync` (at each checkpoint and at the end)."""

from __future__ import annotations

import csv
import json
import math
import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tensorboardX import SummaryWriter

from sacglam.report import METRICS_FILE, metrics_records, read_metrics
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
    from the JSONL and CSV files, and the TensorBoard files are written again from the records
    kept, so the resumed run's records replace them. `mirror`: the run's
    storage when it is not `directory` itself.
    """

    def __init__(self, directory: str | Path, keep_until: int | None = None, mirror: StoragePath | None = None):
        self.directory, self.mirror = Path(directory), mirror
        self.directory.mkdir(parents=True, exist_ok=True)
        jsonl = self.directory / METRICS_FILE
        kept: list[dict[str, Any]] = []
        if keep_until is not None and jsonl.exists():
            # a damaged record is named in the run's own file (a URI run's here is a staging copy)
            named = str(jsonl if mirror is None else mirror / METRICS_FILE)
            records = metrics_records(jsonl.read_text(errors="replace"), named)
            kept = [r for r in records if r["env_steps"] <= keep_until]
            # a crash here leaves the old records or the kept ones, never a part
            StoragePath(jsonl).replace_text("".join(json.dumps(r) + "\n" for r in kept))
        self._jsonl = jsonl.open("a")
        self._csv_path = self.directory / "metrics.csv"
        self._columns: list[str] | None = None  # known after this session's first record
        self._column_set: set[str] = set()
        if keep_until is not None:
            # TensorBoard keeps every event file it finds, and its default reader (the Rust data
            # server) ignores purge steps: the earlier sessions' files are written again from the
            # records kept, so that the resumed session's points replace theirs
            shutil.rmtree(self.directory / TENSORBOARD_DIR, ignore_errors=True)
            if mirror is not None:
                (mirror / TENSORBOARD_DIR).rmtree()
        # flushed every 2 s by the writer's thread: a TensorBoard reading the run live sees each record
        # within seconds (tensorboardX's default is 2 minutes). The file name has the second it was
        # made in: two sessions in one second would share it, the later overwriting the earlier.
        self._tensorboard = SummaryWriter(
            str(self.directory / TENSORBOARD_DIR), flush_secs=2, filename_suffix=f".{time.time_ns()}"
        )
        for record in kept:
            self._add_scalars(record["env_steps"], record)

    def log(self, env_steps: int, values: dict[str, Any]) -> None:
        record = {"env_steps": env_steps, **values}
        self._jsonl.write(json.dumps(record) + "\n")
        self._jsonl.flush()
        self._add_scalars(env_steps, values)
        self._write_csv(record)
        for listener in list(_LISTENERS):
            listener(env_steps, values)

    def _add_scalars(self, env_steps: int, values: dict[str, Any]) -> None:
        for name, value in values.items():
            if name != "env_steps" and isinstance(value, (int, float)) and math.isfinite(value):
                self._tensorboard.add_scalar(name, value, env_steps)

    def _write_csv(self, record: dict[str, Any]) -> None:
        # Columns are the union of every key seen so far, in order of first appearance. The file is
        # rebuilt from the JSONL (which holds every record, earlier sessions' too) at a session's
        # first record and when a record brings a new key (the first records of a run, a goal type
        # discovered late); otherwise the record is appended, and nothing of earlier records is
        # held in memory: a log costs the same at the run's end as at its start.
        new = [k for k in record if k not in self._column_set]
        if self._columns is not None and not new:
            with self._csv_path.open("a", newline="") as f:
                csv.DictWriter(f, fieldnames=self._columns).writerow(record)
            return
        rows = read_metrics(self.directory)
        if self._columns is None:
            self._columns = list(dict.fromkeys(k for row in rows for k in row))
        else:
            self._columns.extend(new)
        self._column_set.update(self._columns)
        with self._csv_path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self._columns)
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
