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

    .venv/bin/python benchmarks/suite/live_curves.py [--env-steps 4096] [--output benchmarks/suite/results/live_curves]

Writes `live_curves.json` and the screenshots (`tensorboard.png`, `prometheus.png`) in `--output`;
prints a table.
"""

from __future__ import annotations

import argparse
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

from sacglam.learner.distributed import free_port  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SUCCESS = "eval/simple-train/sampled/all"
CHROMIUM = ("chromium-headless-shell", "chromium", "google-chrome")


def get_json(url: str) -> object | None:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.loads(response.read())
    except (OSError, ValueError):
        return None


def wait_until(condition, seconds: float, what: str, every: float = 1.0, run: subprocess.Popen | None = None):
    """`condition()`'s first truthy value within `seconds`, else an error naming `what` (at once
    if `run` ended before it: what it printed last is in the message)."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        if run is not None and run.poll() is not None:
            raise SystemExit(f"live_curves: the run ended (exit code {run.returncode}) before {what}")
        time.sleep(every)
    raise SystemExit(f"live_curves: gave up after {seconds:.0f} s waiting for {what}")


def browser() -> str:
    for name in CHROMIUM:
        found = shutil.which(name)
        if found:
            return found
    raise SystemExit("live_curves: no headless Chromium; install it: apt install chromium-headless-shell")


def open_page(url: str, screenshot: Path, ready: str, budget_ms: int = 60_000, tries: int = 4) -> str:
    """The page's DOM after its scripts ran (`--dump-dom`), and a screenshot of it. A page whose
    DOM lacks `ready` yet (its data requests still out: with the run training beside it, once in
    three tries with a 60 s virtual time budget) is opened again, up to `tries` times."""
    common = [browser(), "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1400,900",
              f"--virtual-time-budget={budget_ms}"]  # fmt: skip
    dom = ""
    for _ in range(tries):
        dom = subprocess.run(
            common + ["--dump-dom", url], check=True, capture_output=True, text=True, timeout=180
        ).stdout
        if ready in dom:
            break
    subprocess.run(common + [f"--screenshot={screenshot}", url], check=True, capture_output=True, timeout=180)
    return dom


def logged(run_dir: Path, name: str) -> list[tuple[int, float]]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:  # the line the run is writing right now
            continue
    return [(r["env_steps"], r[name]) for r in rows if name in r]


def start_run(run_dir: Path, env_steps: int, eval_every: int, log: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "sacglam.cli", "train", "--config",
               str(ROOT / "tune_configs" / "runs" / "cpu_simple_sac_her.yaml"), "--runner", "ray",
               "--total-env-steps", str(env_steps), "--eval-every", str(eval_every), "--eval-episodes", "32",
               "--warm-start-steps", "100", "--output-dir", str(run_dir), "--no-progress",
               # four actors on a 2-core machine: fractions of a CPU each, as the Ray tests ask
               "--pipeline.resources.worker-cpus", "0.25", "--pipeline.resources.inference-cpus", "0.25",
               "--pipeline.resources.learner-cpus", "0.5", "--pipeline.resources.replay-cpus", "0.25"]  # fmt: skip
    return subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT)


def announced_tensorboard(log: Path) -> str | None:
    for line in log.read_text().splitlines():
        if line.startswith("curves, live: "):
            return line.removeprefix("curves, live: ").split("  (")[0]
    return None


def start_tensorboard(run: subprocess.Popen, log: Path) -> tuple[subprocess.Popen, str, str]:
    """TensorBoard started with the command the run printed: (server, its URL, the command)."""
    command = wait_until(lambda: announced_tensorboard(log), 300, "the run to print its TensorBoard command", run=run)
    port = free_port()
    server = subprocess.Popen(
        shlex.split(command) + ["--host", "127.0.0.1", "--port", str(port), "--reload_interval", "2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT,
    )  # fmt: skip
    return server, f"http://127.0.0.1:{port}", command


def served_points(base: str) -> list:
    query = urllib.parse.urlencode({"run": ".", "tag": SUCCESS})
    points = get_json(f"{base}/data/plugin/scalars/scalars?{query}")
    return points if isinstance(points, list) else []


def check_tensorboard(base: str, command: str, run_dir: Path, run: subprocess.Popen, output: Path) -> dict:
    """The page in headless Chromium, the SVG renderer, filtered to a few series."""
    points = served_points(base)
    alive = run.poll() is None
    tags = "|".join((SUCCESS, "eval/simple-test/sampled/all", "train/success", "loss/critic"))
    page = f"{base}/?" + urllib.parse.urlencode({"forceSVG": "true", "tagFilter": tags}) + "#timeseries"
    dom = open_page(page, output / "tensorboard.png", ready="<scalar-card")
    written = dict(logged(run_dir, SUCCESS))
    charts = dom[dom.find("<line-chart") :] if "<line-chart" in dom else ""
    lines = re.findall(r"<path[^>]*\sd=\"(M[^\"]+)\"", charts)
    last = f"{points[-1][2]:.4g}" if points else None  # as the card's data table prints the value
    return {
        "command": command,
        "page": page,
        "run_running_when_opened": alive and run.poll() is None,
        "served_points": [[int(step), value] for _, step, value in points],
        "served_equal_logged": bool(points)
        and all(abs(written.get(int(step), -1.0) - value) < 1e-6 for _, step, value in points),
        "page_names_the_series": SUCCESS in dom,
        "chart_cards": dom.count("<scalar-card"),
        "page_shows_the_last_value": last is not None and f"> {last} <" in dom.replace("&nbsp;", " "),
        "last_value": last,
        "svg_paths_in_charts": len(lines),
        "longest_path_points": max((len(re.findall(r"[ML]", d)) for d in lines), default=0),
        "screenshot": "tensorboard.png",
    }


def ray_session(after: float) -> Path | None:
    """The newest Ray session's folder, if it began after `after` (not an earlier cluster's)."""
    latest = Path(tempfile.gettempdir()) / "ray" / "session_latest"
    if not latest.exists():
        return None
    session = latest.resolve()
    return session if session.stat().st_mtime >= after else None


def start_prometheus(run: subprocess.Popen, started: float) -> tuple[subprocess.Popen, str, list[str], Path] | None:
    """Prometheus on Ray's own configuration for the run's session (None: no prometheus binary)."""
    binary = shutil.which("prometheus")
    if binary is None:
        return None
    session = wait_until(lambda: ray_session(after=started - 1), 120, "the run's Ray session", run=run)
    config = session / "metrics" / "prometheus" / "prometheus.yml"
    wait_until(config.exists, 120, f"Ray to write {config}", run=run)
    port, storage = free_port(), Path(tempfile.mkdtemp(prefix="prometheus-"))
    command = [binary, f"--config.file={config}", f"--storage.tsdb.path={storage}",
               f"--web.listen-address=127.0.0.1:{port}"]  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return server, f"http://127.0.0.1:{port}", command, storage


def check_prometheus(base: str, command: list[str], run_dir: Path, run: subprocess.Popen, output: Path) -> dict:
    series = "ray_sacglam_" + re.sub(r"[^a-zA-Z0-9_]", "_", SUCCESS)

    def values():
        answer = get_json(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": series}))
        result = answer.get("data", {}).get("result") if isinstance(answer, dict) else None
        return result or None

    result = wait_until(values, 300, f"Prometheus to scrape {series}", every=2.0)
    alive = run.poll() is None
    names = get_json(f"{base}/api/v1/label/__name__/values") or {}
    sacglam = sorted(n for n in names.get("data", []) if n.startswith("ray_sacglam_"))  # type: ignore[union-attr]
    shown = '{__name__=~"ray_sacglam_eval_simple_.*_sampled_all|ray_sacglam_train_success"}'
    graph = f"{base}/graph?" + urllib.parse.urlencode({"g0.expr": shown, "g0.tab": "0", "g0.range_input": "5m"})
    dom = open_page(graph, output / "prometheus.png", ready="ray_sacglam_train_success")
    latest_value = float(result[0]["value"][1])
    written = [v for _, v in logged(run_dir, SUCCESS)]
    return {
        "command": " ".join(command[:2]) + " --storage.tsdb.path=<dir>",
        "run_running_when_scraped": alive,
        "series": series,
        "value": latest_value,
        "value_is_a_logged_one": any(abs(latest_value - v) < 1e-6 for v in written),
        "sacglam_series": len(sacglam),
        "page_names_the_series": "ray_sacglam_train_success" in dom,
        "page": graph,
        "screenshot": "prometheus.png",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env-steps", type=int, default=8192)
    parser.add_argument("--eval-every", type=int, default=1024)
    parser.add_argument("--evaluations", type=int, default=5, help="points on the page before it is opened")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "suite" / "results" / "live_curves")
    args = parser.parse_args()
    args.output.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="live-curves-"))
    run_dir, log = work / "run", work / "run.log"
    started = time.time()
    run = start_run(run_dir, args.env_steps, args.eval_every, log)
    servers: list[subprocess.Popen] = []
    started_prometheus = None
    prometheus: dict = {"skipped": "no prometheus binary (Debian: apt install prometheus)"}
    try:
        tensorboard_server, tensorboard_url, command = start_tensorboard(run, log)
        servers.append(tensorboard_server)
        started_prometheus = start_prometheus(run, started)
        if started_prometheus is not None:
            servers.append(started_prometheus[0])
        wait_until(
            lambda: len(served_points(tensorboard_url)) >= args.evaluations,
            1800,
            f"{args.evaluations} evaluations in TensorBoard",
            run=run,
        )
        tensorboard = check_tensorboard(tensorboard_url, command, run_dir, run, args.output)
        if started_prometheus is not None:
            _, url, prometheus_command, _ = started_prometheus
            prometheus = check_prometheus(url, prometheus_command, run_dir, run, args.output)
        run.wait(timeout=1800)
    except SystemExit:
        print("the run's output, last lines:\n" + "\n".join(log.read_text().splitlines()[-15:]), file=sys.stderr)
        raise
    finally:
        for server in servers:
            server.terminate()
            server.wait(timeout=30)
        if started_prometheus is not None:
            shutil.rmtree(started_prometheus[3], ignore_errors=True)
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
            if key not in ("command", "page", "screenshot", "served_points"):
                print(f"| {part}: {key} | {value} |")
    print(f"| run exit code | {run.returncode} |\n| seconds | {result['seconds']} |")
    shutil.rmtree(work, ignore_errors=True)
    failed = not (
        tensorboard["run_running_when_opened"]
        and tensorboard["served_equal_logged"]
        and tensorboard["page_names_the_series"]
        and tensorboard["page_shows_the_last_value"]
        and tensorboard["longest_path_points"] >= 2
    )
    if "skipped" not in prometheus:
        failed = failed or not (
            prometheus["run_running_when_scraped"]
            and prometheus["value_is_a_logged_one"]
            and prometheus["page_names_the_series"]
            and prometheus["sacglam_series"] > 0
        )
    sys.exit(1 if failed or run.returncode else 0)


if __name__ == "__main__":
    main()
