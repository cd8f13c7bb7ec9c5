"""Where the test suite's CPU time goes: core-seconds per test file, per Ray actor class and per
other process (the static checks, compilers, servers), from one run of pytest.

The suite is CPU-bound on this project's 2-core machines (two xdist workers, both cores busy from
start to end), so its wall time is its core-seconds over two: a test's `--durations` figure
includes whatever the other worker ran beside it, and a Ray test's actors run in processes of
their own that `--durations` does not see. This script counts both:

- each test, as a pytest plugin on every xdist worker: the worker's CPU time over the test and
  that of the children it waited for (subprocesses, process pools);
- every other process, from /proc sampled every half second: its CPU time while the run lasted,
  grouped by Ray actor class (`ray::LearnerService`) or command.

    .venv/bin/python benchmarks/suite/suite_cost.py                        # the whole suite, as `make test` runs it
    .venv/bin/python benchmarks/suite/suite_cost.py -- tests/test_tune.py  # pytest arguments after --

Writes benchmarks/suite/results/suite_cost/suite_cost.json and prints the tables. The sampler costs about 2% of a
core. Time nothing else while it runs.
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECORDS_ENV = "SACGLAM_SUITE_COST_DIR"  # where the plugin writes each worker's per-test records


# ---------------------------------------------------------------- the pytest plugin (`-p suite_cost`)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    start_self, start_children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.time()
    yield
    end_self, end_children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    record = {
        "test": item.nodeid,
        "start": start,
        "end": time.time(),
        "self_s": end_self.ru_utime + end_self.ru_stime - start_self.ru_utime - start_self.ru_stime,
        "children_s": end_children.ru_utime + end_children.ru_stime - start_children.ru_utime - start_children.ru_stime,
    }
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(Path(os.environ[RECORDS_ENV]) / f"{worker}.jsonl", "a") as out:
        out.write(json.dumps(record) + "\n")


# ---------------------------------------------------------------- the /proc sampler


class ProcessSampler(threading.Thread):
    """Every `period` seconds, each process's command line and CPU seconds (user + system) from
    /proc. A process alive at the first sweep counts from there; a process that starts and ends
    between two sweeps is not seen (a shell's `sleep`, not an actor)."""

    def __init__(self, period: float = 0.5):
        super().__init__(daemon=True)
        self.period, self.seen, self.done = period, {}, threading.Event()
        self.ticks = os.sysconf("SC_CLK_TCK")

    def run(self) -> None:
        first = True
        while not self.done.is_set():
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    stat = Path(f"/proc/{pid}/stat").read_text()
                    fields = stat[stat.rindex(")") + 2 :].split()
                    cpu = (int(fields[11]) + int(fields[12])) / self.ticks
                    command = Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ").strip()
                except (OSError, ValueError, IndexError):
                    continue  # it ended between listing and reading
                key = f"{pid}:{fields[19]}"  # pid and start time: a reused pid is another process
                if key not in self.seen:
                    self.seen[key] = {"command": command, "cpu_s": cpu, "base_s": cpu if first else 0.0}
                else:
                    self.seen[key]["cpu_s"] = cpu
                    if command:  # a Ray worker renames itself to its actor class once it holds one
                        self.seen[key]["command"] = command
            first = False
            self.done.wait(self.period)

    def stop(self) -> dict[str, dict]:
        self.done.set()
        self.join()
        return self.seen


def process_group(command: str) -> str:
    """The group a process's CPU time is reported under."""
    actor = re.search(r"ray::([\w]+)", command)
    if actor:
        return f"ray::{actor.group(1)}"
    for marker, name in (
        ("default_worker.py", "ray worker (idle)"),
        ("raylet", "ray: raylet"),
        ("gcs_server", "ray: gcs_server"),
        ("dashboard", "ray: dashboard and agents"),
        ("log_monitor", "ray: log_monitor"),
        ("runtime_env", "ray: runtime_env agent"),
        ("mypy", "mypy"),
        ("ruff", "ruff"),
        ("lint-imports", "import-linter"),
        ("moto.server", "moto (S3 server)"),
        ("cc1plus", "C++ compiler (Inductor)"),
        ("/ld ", "linker (Inductor)"),
        ("multiprocessing.spawn", "process pools (spawn: the sanity runs, ...)"),
        ("-m sacglam", "sacglam subprocesses"),
        ("bin/sacglam ", "sacglam subprocesses"),
        ("execnet", "pytest-xdist workers"),
        ("exec(eval(sys.stdin", "pytest-xdist workers"),
        ("pytest", "pytest"),
    ):
        if marker in command:
            return name
    return command.split(" ")[0].rsplit("/", 1)[-1][:40] or "(no command line)"


def summarise(records: list[dict], processes: dict[str, dict], wall_s: float) -> dict:
    by_file: dict[str, float] = defaultdict(float)
    for record in records:
        by_file[record["test"].split("::")[0]] += record["self_s"] + record["children_s"]
    by_group: dict[str, float] = defaultdict(float)
    for process in processes.values():
        by_group[process_group(process["command"])] += process["cpu_s"] - process["base_s"]
    tests = sorted(records, key=lambda r: -(r["self_s"] + r["children_s"]))
    return {
        "wall_s": round(wall_s, 1),
        "machine_busy_s": round(sum(by_group.values()), 1),
        "by_file": {f: round(s, 1) for f, s in sorted(by_file.items(), key=lambda x: -x[1])},
        "by_process": {g: round(s, 1) for g, s in sorted(by_group.items(), key=lambda x: -x[1]) if s >= 0.5},
        "tests": [
            {
                "test": r["test"],
                "cpu_s": round(r["self_s"] + r["children_s"], 1),
                "wall_s": round(r["end"] - r["start"], 1),
            }
            for r in tests[:40]
        ],
    }


def print_tables(summary: dict) -> None:
    print(f"wall {summary['wall_s']} s, CPU of every process seen {summary['machine_busy_s']} core-seconds\n")
    print("| core-seconds | test file (in the xdist worker and its waited children) |\n| --- | --- |")
    for name, seconds in list(summary["by_file"].items())[:25]:
        print(f"| {seconds:,.1f} | {name} |")
    print("\n| core-seconds | process group (every process; the xdist workers include the rows above) |\n| --- | --- |")
    for name, seconds in list(summary["by_process"].items())[:25]:
        print(f"| {seconds:,.1f} | {name} |")


def main(pytest_args: list[str], output: Path) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as records_dir:
        env = os.environ | {
            RECORDS_ENV: records_dir,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH")])),
        }
        command = [sys.executable, "-m", "pytest", "-p", "suite_cost", "-q", *pytest_args]
        sampler = ProcessSampler()
        sampler.start()
        start = time.monotonic()
        done = subprocess.run(command, cwd=ROOT, env=env, check=False)
        wall = time.monotonic() - start
        processes = sampler.stop()
        records = [json.loads(line) for f in Path(records_dir).glob("*.jsonl") for line in f.read_text().splitlines()]
    summary = summarise(records, processes, wall) | {"command": " ".join(command[2:]), "returncode": done.returncode}
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(summary, indent=1) + "\n")
    print_tables(summary)
    print(f"\nwrote {output}")


if __name__ == "__main__":
    args = sys.argv[1:]
    extra = args[args.index("--") + 1 :] if "--" in args else ["-n", "2", "--no-loadscope-reorder"]
    main(extra, ROOT / "benchmarks" / "results" / "suite_cost.json")
