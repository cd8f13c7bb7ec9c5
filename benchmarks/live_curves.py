"""A run's curves, live, in a real browser: checked, with screenshots.

Starts a short SAC-GLAM+HER run of the tiny model through the Ray runner (`sacglam train`, as a
user would), reads the TensorBoard command the run prints, serves the run's event files with it,
and once the run has logged a few evaluations, while it is still running, opens the page in
headless Chromium (`chromium-headless-shell`, Debian's package) with TensorBoard's SVG renderer
(`?forceSVG=true`: a headless browser without a GPU draws TensorBoard's default WebGL charts
blank). It checks that the page names the success series and draws a line through its points,
and that TensorBoard's data API serves the values the run wrote to `metrics.jsonl`.

Where the `prometheus` binary is present (Debian: `apt install prometheus`), the same run is also
scraped by Prometheus with the configuration Ray writes for its session
(`<session>/metrics/prometheus/prometheus.yml`, which reads Ray's service-discovery file): the
script waits for the `ray_sacglam_*` series, checks their values against the run's, and takes a
screenshot of Prometheus' own graph page. Without the binary, that part says it was skipped.

    .venv/bin/python benchmarks/live_curves.py [--env-steps 4096] [--output benchmarks/results/live_curves]

Writes `live_curves.json` and the screenshots (`tensorboard.png`, `prometheus.png`) in `--output`;
prints a table.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUCCESS = "eval/simple-train/sampled/all"
CHROMIUM = ("chromium-headless-shell", "chromium", "google-chrome")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str) -> object | None:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.loads(response.read())
    except (OSError, ValueError):
        return None


def wait_until(condition, seconds: float, what: str, every: float = 1.0):
    """`condition()`'s first truthy value within `seconds`, else an error naming `what`."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise SystemExit(f"live_curves: gave up after {seconds:.0f} s waiting for {what}")


def browser() -> str:
    for name in CHROMIUM:
        found = shutil.which(name)
        if found:
            return found
    raise SystemExit("live_curves: no headless Chromium; install it: apt install chromium-headless-shell")


def open_page(url: str, screenshot: Path, budget_ms: int = 20_000) -> str:
    """The page's DOM after its scripts ran (`--dump-dom`), and a screenshot of it."""
    common = [browser(), "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1400,900",
              f"--virtual-time-budget={budget_ms}"]  # fmt: skip
    subprocess.run(common + [f"--screenshot={screenshot}", url], check=True, capture_output=True, timeout=120)
    dom = subprocess.run(common + ["--dump-dom", url], check=True, capture_output=True, text=True, timeout=120)
    return dom.stdout


def logged(run_dir: Path, name: str) -> list[tuple[int, float]]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [(r["env_steps"], r[name]) for r in rows if name in r]


def start_run(run_dir: Path, env_steps: int, eval_every: int, log: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "sacglam.cli", "train", "--config",
               str(ROOT / "tune_configs" / "runs" / "cpu_simple_sac_her.yaml"), "--runner", "ray",
               "--total-env-steps", str(env_steps), "--eval-every", str(eval_every), "--eval-episodes", "32",
               "--warm-start-steps", "100", "--output-dir", str(run_dir), "--no-progress"]  # fmt: skip
    return subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT)


def announced_tensorboard(log: Path) -> str | None:
    for line in log.read_text().splitlines():
        if line.startswith("curves, live: "):
            return line.removeprefix("curves, live: ").split("  (")[0]
    return None


def check_tensorboard(run_dir: Path, run: subprocess.Popen, log: Path, output: Path, evaluations: int) -> dict:
    command = wait_until(lambda: announced_tensorboard(log), 300, "the run to print its TensorBoard command")
    port = free_port()
    server = subprocess.Popen(
        shlex.split(command) + ["--host", "127.0.0.1", "--port", str(port), "--reload_interval", "2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    query = urllib.parse.urlencode({"run": ".", "tag": SUCCESS})

    def served():
        points = get_json(f"{base}/data/plugin/scalars/scalars?{query}")
        return points if isinstance(points, list) and len(points) >= evaluations else None

    try:
        points = wait_until(served, 900, f"{evaluations} evaluations in TensorBoard")
        alive = run.poll() is None
        tags = "|".join(re.escape(t) for t in (SUCCESS, "eval/simple-test/sampled/all", "loss/critic", "alpha"))
        page = f"{base}/?forceSVG=true#timeseries&tagFilter={urllib.parse.quote(tags)}"
        dom = open_page(page, output / "tensorboard.png")
        still_alive = run.poll() is None
    finally:
        server.terminate()
        server.wait(timeout=30)
    written = dict(logged(run_dir, SUCCESS))
    lines = re.findall(r'<path[^>]*class="[^"]*line[^"]*"[^>]*\sd="([^"]+)"', dom)
    return {
        "command": command,
        "page": page,
        "run_running_when_opened": alive and still_alive,
        "served_points": [[int(step), value] for _, step, value in points],
        "served_equal_logged": all(abs(written.get(int(step), -1.0) - value) < 1e-6 for _, step, value in points),
        "page_names_the_series": html.escape(SUCCESS) in dom or SUCCESS in dom,
        "line_paths_drawn": len(lines),
        "longest_line_segments": max((d.count("L") for d in lines), default=0),
        "screenshot": "tensorboard.png",
    }


def ray_session() -> Path | None:
    latest = Path(tempfile.gettempdir()) / "ray" / "session_latest"
    return latest.resolve() if latest.exists() else None


def check_prometheus(run_dir: Path, run: subprocess.Popen, output: Path) -> dict:
    binary = shutil.which("prometheus")
    if binary is None:
        return {"skipped": "no prometheus binary (Debian: apt install prometheus)"}
    session = wait_until(ray_session, 120, "the run's Ray session")
    config = session / "metrics" / "prometheus" / "prometheus.yml"
    wait_until(config.exists, 120, f"Ray to write {config}")
    port, storage = free_port(), Path(tempfile.mkdtemp(prefix="prometheus-"))
    command = [binary, f"--config.file={config}", f"--storage.tsdb.path={storage}",
               f"--web.listen-address=127.0.0.1:{port}"]  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    series = "ray_sacglam_" + re.sub(r"[^a-zA-Z0-9_]", "_", SUCCESS)

    def values():
        answer = get_json(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": series}))
        result = answer.get("data", {}).get("result") if isinstance(answer, dict) else None
        return result or None

    try:
        result = wait_until(values, 300, f"Prometheus to scrape {series}", every=2.0)
        alive = run.poll() is None
        names = get_json(f"{base}/api/v1/label/__name__/values") or {}
        sacglam = sorted(n for n in names.get("data", []) if n.startswith("ray_sacglam_"))
        graph = f"{base}/graph?" + urllib.parse.urlencode({"g0.expr": series, "g0.tab": "0", "g0.range_input": "15m"})
        dom = open_page(graph, output / "prometheus.png")
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(storage, ignore_errors=True)
    latest_value = float(result[0]["value"][1])
    written = [v for _, v in logged(run_dir, SUCCESS)]
    return {
        "command": " ".join(command[:2]) + " --storage.tsdb.path=<dir>",
        "run_running_when_scraped": alive,
        "series": series,
        "value": latest_value,
        "value_is_a_logged_one": any(abs(latest_value - v) < 1e-6 for v in written),
        "sacglam_series": len(sacglam),
        "page_names_the_series": series in dom,
        "screenshot": "prometheus.png",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env-steps", type=int, default=4096)
    parser.add_argument("--eval-every", type=int, default=512)
    parser.add_argument("--evaluations", type=int, default=3, help="points on the page before it is opened")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "live_curves")
    args = parser.parse_args()
    args.output.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="live-curves-"))
    run_dir, log = work / "run", work / "run.log"
    started = time.time()
    run = start_run(run_dir, args.env_steps, args.eval_every, log)
    try:
        tensorboard = check_tensorboard(run_dir, run, log, args.output, args.evaluations)
        prometheus = check_prometheus(run_dir, run, args.output)
        run.wait(timeout=1800)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGINT)
            run.wait(timeout=120)
    result = {
        "run": f"sacglam train --config tune_configs/runs/cpu_simple_sac_her.yaml --runner ray "
        f"--total-env-steps {args.env_steps} --eval-every {args.eval_every}",
        "run_exit_code": run.returncode,
        "seconds": round(time.time() - started, 1),
        "tensorboard": tensorboard,
        "prometheus": prometheus,
    }
    (args.output / "live_curves.json").write_text(json.dumps(result, indent=2) + "\n")
    print("| check | result |\n| --- | --- |")
    for part in ("tensorboard", "prometheus"):
        for key, value in result[part].items():
            if key not in ("command", "page", "screenshot"):
                print(f"| {part}: {key} | {value} |")
    print(f"| run exit code | {run.returncode} |\n| seconds | {result['seconds']} |")
    shutil.rmtree(work, ignore_errors=True)
    failed = not (
        tensorboard["served_equal_logged"] and tensorboard["page_names_the_series"] and tensorboard["line_paths_drawn"]
    )
    sys.exit(1 if failed or run.returncode else 0)


if __name__ == "__main__":
    main()
