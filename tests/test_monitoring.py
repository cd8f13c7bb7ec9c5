"""Live curves: the TensorBoard a run announces (the package `make` installs) serves the event
files the run's `MetricsLogger` writes, with the logged values, and picks up what the run appends
while it runs. (The page itself in headless Chromium, and Prometheus: `benchmarks/suite/live_curves.py`.)"""

import csv
import json
import shlex
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from sacglam.learner.distributed import free_port
from sacglam.pipeline import metrics as metrics_module
from sacglam.pipeline.metrics import MetricsLogger, tensorboard_command

TAG = "eval/simple-train/sampled/all"


def _served(url: str, tag: str) -> list[tuple[int, float]]:
    """(step, value) of `tag` as TensorBoard's scalars API serves it; [] until it has read them."""
    query = urllib.parse.urlencode({"run": ".", "tag": tag})
    try:
        with urllib.request.urlopen(f"{url}/data/plugin/scalars/scalars?{query}", timeout=5) as response:
            return [(step, value) for _, step, value in json.loads(response.read())]
    except (OSError, ValueError):  # not up yet, or the tag not read yet (400)
        return []


def _wait_for(url: str, tag: str, wanted: list[tuple[int, float]], seconds: float = 60) -> list[tuple[int, float]]:
    deadline, served = time.time() + seconds, []
    while time.time() < deadline:
        served = _served(url, tag)
        if served == wanted:
            break
        time.sleep(0.5)
    return served


def test_the_announced_tensorboard_serves_the_logged_values_and_what_the_run_appends(tmp_path):
    logger = MetricsLogger(tmp_path)
    logger.log(0, {TAG: 0.25, "train/success": 0.125, "note": "not a number: not a scalar"})
    command = tensorboard_command(tmp_path)
    assert command.endswith(f"--logdir {tmp_path / 'tensorboard'}")
    port = free_port()
    server = subprocess.Popen(
        shlex.split(command) + ["--host", "127.0.0.1", "--port", str(port), "--reload_interval", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        assert _wait_for(url, TAG, [(0, 0.25)]) == [(0, 0.25)], server.poll() is not None and server.stderr.read()
        logger.log(128, {TAG: 0.5})  # the run goes on: TensorBoard re-reads the growing file
        assert _wait_for(url, TAG, [(0, 0.25), (128, 0.5)]) == [(0, 0.25), (128, 0.5)]
        assert _served(url, "train/success") == [(0, 0.125)]
    finally:
        server.terminate()
        server.wait(timeout=30)
        logger.close()


@pytest.mark.parametrize("inside", [True, False])
def test_the_command_names_the_run_folder_relative_when_it_can(tmp_path, monkeypatch, inside):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(tmp_path if inside else elsewhere)  # the run folder under it, or beside it
    command = tensorboard_command(tmp_path / "run")
    assert command.split()[-1] == ("run/tensorboard" if inside else str(tmp_path / "run" / "tensorboard"))


def test_a_run_folder_with_a_space_gives_a_command_a_shell_reads_back(tmp_path):
    words = shlex.split(tensorboard_command(tmp_path / "my run"))
    assert words[-2:] == ["--logdir", str(tmp_path / "my run" / "tensorboard")]


def _naive_csv(records: list[dict]) -> list[dict[str, str]]:
    """The CSV a reader expects: every record, the union of their keys, absent ones empty."""
    columns = []
    for record in records:
        columns += [k for k in record if k not in columns]
    return [{c: "" if c not in r else str(r[c]) for c in columns} for r in records]


def _never_read(run_dir):
    raise AssertionError("a log read every earlier record")


def test_the_csv_holds_every_record_under_the_union_of_their_columns_and_appends_when_none_is_new(
    tmp_path, monkeypatch
):
    logger = MetricsLogger(tmp_path)
    records = [
        {"env_steps": 0, "a": 1.5},
        {"env_steps": 64, "a": 2.5, "b": 3},
        {"env_steps": 128, "b": 4},
        {"env_steps": 192, "a": 0.5},
    ]
    sizes = []
    for record in records:
        logger.log(record["env_steps"], {k: v for k, v in record.items() if k != "env_steps"})
        sizes.append((tmp_path / "metrics.csv").stat().st_size)
    logger.close()
    with (tmp_path / "metrics.csv").open(newline="") as f:
        assert list(csv.DictReader(f)) == _naive_csv(records)
    with (tmp_path / "metrics.csv").open(newline="") as f:
        lines = f.read().splitlines()
    # a record without a new column adds exactly its own line to the file (not a rewrite)
    assert sizes[3] - sizes[2] == len(lines[-1]) + 2  # csv's \r\n

    # the cost of a log does not grow with the run: one without a new column reads no earlier
    # record (and the logger keeps none in memory: a rebuild reads them from the JSONL)
    growing = MetricsLogger(tmp_path / "long")
    growing.log(0, {"a": 0.0})
    with monkeypatch.context() as patch:
        patch.setattr(metrics_module, "read_metrics", _never_read)
        for step in range(1, 50):
            growing.log(step, {"a": float(step)})
    growing.log(50, {"late": 1.0})  # a new key rebuilds the file with every record
    growing.close()
    with (tmp_path / "long" / "metrics.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["a"] for r in rows[:50]] == [str(float(s)) for s in range(50)] and rows[-1]["late"] == "1.0"

    resumed = MetricsLogger(tmp_path, keep_until=64)  # a resume from env step 64 drops the later records
    resumed.log(128, {"c": 7})
    resumed.close()
    with (tmp_path / "metrics.csv").open(newline="") as f:
        assert list(csv.DictReader(f)) == _naive_csv([*records[:2], {"env_steps": 128, "c": 7}])


def test_a_resume_drops_the_earlier_sessions_tensorboard_events_past_its_checkpoint(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    first = MetricsLogger(tmp_path)
    for step in (0, 64, 128, 192):
        first.log(step, {"loss": float(step)})
    first.close()  # killed after 192; its checkpoint was at 64
    resumed = MetricsLogger(tmp_path, keep_until=64)
    for step in (128, 192):
        resumed.log(step, {"loss": -float(step)})
    resumed.close()
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    points = [(e.step, e.value) for e in events.Scalars("loss")]
    assert points == [(0, 0.0), (64, 64.0), (128, -128.0), (192, -192.0)]  # one point per step, the resumed ones
