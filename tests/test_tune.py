"""Experiment files and Ray Tune grids: every file in tune_configs/experiments/ expands into valid trials; a
2x2 CPU grid with the tiny model runs end to end through Tune into one table and one plot."""

import json
import shutil
from pathlib import Path

import pytest
import yaml

from sacglam.config_io import ConfigError
from sacglam.experiments.spec import load_experiment

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = sorted((ROOT / "tune_configs" / "experiments").glob("*.yaml"))


def test_experiment_grids_and_run_configs_live_apart():
    """tune_configs/experiments/ holds only grids (a `forms:` key), tune_configs/runs/ only run configs."""
    runs = sorted((ROOT / "tune_configs" / "runs").glob("*.yaml"))
    assert EXPERIMENTS and runs
    assert all("forms" in yaml.safe_load(p.read_text()) for p in EXPERIMENTS)
    assert not any("forms" in yaml.safe_load(p.read_text()) for p in runs)
    assert not list((ROOT / "tune_configs").glob("*.yaml")), "a config file outside runs/ and experiments/"


def test_the_papers_experiments_are_all_there():
    names = {p.stem for p in EXPERIMENTS}
    assert {"figure2", "nstep_buffer", "update_freq", "her_sampling", "critic_arch", "ppo_her", "stability"} <= names


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_every_experiment_has_a_cpu_and_a_gpu_form_of_valid_trials(path):
    forms = list(yaml.safe_load(path.read_text())["forms"])
    assert "gpu" in forms and any(f.startswith("cpu") for f in forms)
    for form in forms:
        experiment = load_experiment(path, form)
        assert experiment.trials
        names = [t.name for t in experiment.trials]
        assert len(set(names)) == len(names)  # one directory per trial
        for trial in experiment.trials:
            assert trial.train_config().seed == trial.coordinates["seed"]
    gpu = load_experiment(path, "gpu")
    assert len({t.coordinates["seed"] for t in gpu.trials}) == 4  # the paper's 4 seeds


def test_nstep_buffer_grid_is_n_by_capacity_by_default():
    experiment = load_experiment(ROOT / "tune_configs" / "experiments" / "nstep_buffer.yaml", "gpu")
    cells = {(t.coordinates["sac.n_step"], t.coordinates["sac.buffer_capacity"]) for t in experiment.trials}
    assert cells == {(n, c) for n in (1, 3, 5) for c in (10_000, 100_000, 1_000_000)}


def _write(tmp_path, form) -> Path:
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump({"description": "test grid", "forms": {"cpu": form}}))
    return path


def test_a_bad_grid_key_fails_before_anything_runs_naming_the_trial_and_key(tmp_path):
    path = _write(
        tmp_path,
        {"base": str(ROOT / "tune_configs" / "runs" / "cpu_simple_sac_her.yaml"), "grid": {"sac.n_stepp": [1, 3]}},
    )
    with pytest.raises(ConfigError, match=r"n_stepp.*did you mean 'n_step'"):
        load_experiment(path)
    with pytest.raises(ConfigError, match="no form 'gpu'"):
        load_experiment(path, "gpu")
    with pytest.raises(ConfigError, match=r"grid.yaml:forms.cpu, trial n_stepp=1,seed=0:sac: unknown key"):
        load_experiment(path)  # the file, the form and the trial


BASE = str(ROOT / "tune_configs" / "runs" / "cpu_simple_sac_her.yaml")
GRID_MISTAKES = {
    "a seed in the grid": ({"grid": {"seed": [0, 1]}}, r"forms.cpu.grid: `seed` is set by the form's `seeds:`"),
    "a seed in set": ({"set": {"seed": 3}}, r"forms.cpu.set: `seed` is set by"),
    "a seed in a variant": ({"variants": {"a": {"seed": 3}}}, r"forms.cpu.variants.a: `seed` is set by"),
    "a value twice": ({"grid": {"sac.tau": [0.01, 1.0e-2]}}, r"grid.sac.tau: 0.01 is given twice"),
    "a value twice, once in exponent form": (
        {"grid": {"sac.tau": [0.01, "1e-2"]}},
        r"grid.sac.tau: '1e-2' is given twice",
    ),
    "a seed twice": ({"seeds": [0, 0]}, r"seeds: \[0, 0\] gives a seed twice"),
    "a word for a number": ({"max_concurrent": "two"}, r"max_concurrent: expected an integer >= 1, got 'two'"),
    "a base that is not there": ({"base": "nothing.yaml"}, r"forms.cpu.base: .*nothing.yaml does not exist"),
    "a grid over a setting the environment never reads": (
        {"set": {"env": {"name": "tests.broken_envs:Dial", "goals": "train"}}, "grid": {"env.max_steps": [3, 5]}},
        r"trial max_steps=3,seed=0: env.max_steps is a setting of playground-text, babyai-text, textworld, which "
        r"env.name 'tests.broken_envs:Dial' does not read: pass the environment's own settings in env.kwargs",
    ),
}


@pytest.mark.parametrize("mistake", list(GRID_MISTAKES))
def test_a_grid_that_would_run_other_trials_than_it_says_is_refused_before_any_runs(mistake, tmp_path):
    """A seed anywhere but `seeds:` was overwritten by it (three trials named seed=0,1,2 all ran
    seed 0), and a repeated value ran the same trial twice: both are refused, as are limits that
    are not integers, each in one line naming the file and the key."""
    form, expected = GRID_MISTAKES[mistake]
    with pytest.raises(ConfigError, match=expected):
        load_experiment(_write(tmp_path, {"base": BASE} | form))


def test_grid_keys_that_share_their_last_part_keep_trial_names_apart(tmp_path):
    form = {"base": BASE, "grid": {"sac.gamma": [0.9], "ppo.gamma": [0.99]}}
    (trial,) = load_experiment(_write(tmp_path, form)).trials
    assert set(trial.name.split(",")) == {"sac.gamma=0.9", "ppo.gamma=0.99", "seed=0"}  # not gamma=..., gamma=...


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.tune
def test_a_2x2_grid_runs_through_tune_into_one_table_and_one_plot(tmp_path, ray_local):
    import pyarrow.parquet as pq

    from sacglam.experiments.results import plot_experiment
    from sacglam.experiments.tune_runner import run_grid

    small = {
        "total_env_steps": 256,
        "eval_every": 128,
        "eval_episodes": 4,
        "log_every": 64,
        "num_envs": 8,
        "warm_start_steps": 2,
        "agent": {"critic_width": 32},
        "sac": {"batch_size": 16, "critic_warmup_updates": 2},
    }
    path = _write(
        tmp_path,
        {
            "base": str(ROOT / "tune_configs" / "runs" / "cpu_simple_sac_her.yaml"),
            "set": small,
            "grid": {"sac.n_step": [1, 3]},
            "seeds": [0, 1],
            "trial": {"cpus": 1, "threads": 1},
            "max_concurrent": 2,
        },
    )
    # what a start that failed before Tune saved anything leaves: a fresh run starts there again
    (tmp_path / "tune" / "grid-cpu").mkdir(parents=True)
    (tmp_path / "tune" / "grid-cpu" / "experiment.json").write_text("{}")
    directory = run_grid(path, "cpu", storage=tmp_path / "tune")  # on the running `ray_local` cluster
    rows = pq.read_table(directory / "results.parquet").to_pylist()
    trials = {r["trial"] for r in rows}
    assert trials == {f"n_step={n},seed={s}" for n in (1, 3) for s in (0, 1)}
    for trial in trials:
        steps = [r["env_steps"] for r in rows if r["trial"] == trial]
        assert len(steps) == len(set(steps)) and steps[0] == 0 and steps[-1] >= 256  # one row per trial and step
    assert all(r["sac.n_step"] in (1, 3) and r["seed"] in (0, 1) for r in rows)
    evaluated = [r for r in rows if r.get("eval/simple-train/sampled/all") is not None]
    assert {r["env_steps"] for r in evaluated} >= {0, 128, 256}
    assert (directory / "results.csv").read_text().count("\n") == len(rows) + 1
    # the CSV copy the benchmarks keep reads back as the same rows (empty cells as None)
    from sacglam.experiments.results import load_table

    csv_copy = tmp_path / "copy"
    csv_copy.mkdir()
    shutil.copy(directory / "results.csv", csv_copy / "results.csv")
    from_csv = load_table(csv_copy)
    assert len(from_csv) == len(rows)
    for a, b in zip(from_csv, rows):
        assert a.keys() == b.keys()
        for key in a:
            assert (a[key] is None and b[key] is None) or a[key] == pytest.approx(b[key]), key
    with pytest.raises(FileNotFoundError, match="results.parquet or results.csv"):
        load_table(tmp_path / "nowhere")
    # a resume of the grid after its file changed would rerun the old grid silently: refused
    from sacglam.experiments.tune_runner import ExperimentChangedError

    changed = yaml.safe_load(path.read_text())
    changed["forms"]["cpu"]["grid"]["sac.n_step"] = [1, 3, 5]
    path.write_text(yaml.safe_dump(changed))
    with pytest.raises(ExperimentChangedError, match="now makes other trials than"):
        run_grid(path, "cpu", storage=tmp_path / "tune", resume=True)
    png, summary = plot_experiment(directory)
    assert png.stat().st_size > 10_000
    text = summary.read_text()
    assert "n_step=1" in text and "n_step=3" in text and "| 2 |" in text  # two seeds per configuration
    assert (
        "unfinished" not in text.split("|", 1)[1]
        and json.loads((directory / "experiment.json").read_text())["incomplete"] == []
    )
    # each trial writes its report, as `sacglam train` does (its lines are read there)
    assert all((directory / trial / "run" / "report.md").is_file() for trial in trials)
    # a metric no trial logged: one line naming those it could be, and the summary stays as it was
    from sacglam.experiments.results import UnknownMetricError

    with pytest.raises(UnknownMetricError, match=r"eval/simple-tset/greedy/all.*choose one of eval/simple-"):
        plot_experiment(directory, "eval/simple-tset/greedy/all")
    assert summary.read_text() == text
    # a trial stopped before its budget (interrupted, failed) is counted as unfinished in the summary
    import pyarrow as pa

    cut = [r for r in rows if not (r["trial"] == "n_step=3,seed=1" and r["env_steps"] > 128)]
    pq.write_table(pa.Table.from_pylist(cut), directory / "results.parquet")
    _, summary = plot_experiment(directory)
    assert "| n_step=3 | 2 (1 unfinished) |" in summary.read_text() and "| n_step=1 | 2 |" in summary.read_text()


def test_a_retried_trial_resumes_from_its_intact_checkpoint_and_restarts_when_none_is(tmp_path, monkeypatch):
    """What a trial does when Tune retries it (a failure, `--resume` of the grid): its run
    directory holds an intact checkpoint -> it continues from it; only damaged ones -> it starts
    afresh. (The trainable itself, without Tune around it.)"""
    import json
    from dataclasses import asdict

    import ray.tune

    from sacglam.experiments.tune_runner import run_trial, trial_run_dir

    monkeypatch.setattr(ray.tune, "report", lambda metrics, **_: None)
    path = tmp_path / "retry.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "forms": {
                    "cpu": {
                        "base": str(ROOT / "tune_configs" / "runs" / "cpu_simple_sac_her.yaml"),
                        "set": {
                            "total_env_steps": 256,
                            "eval_every": 256,
                            "eval_episodes": 2,
                            "num_envs": 8,
                            "warm_start_steps": 2,
                            "agent": {"critic_width": 32},
                            "sac": {"batch_size": 16, "critic_warmup_updates": 2},
                            "pipeline": {"checkpoint_every": 128},
                        },
                        "seeds": [0],
                    }
                }
            }
        )
    )
    (trial,) = load_experiment(path).trials
    param = {"__trial__": {"trial": asdict(trial), "threads": 1, "experiment_dir": str(tmp_path / "exp")}}
    run = trial_run_dir(str(tmp_path / "exp"), trial.name).local()

    def records() -> list[dict]:
        return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]

    run_trial(param)
    first = records()
    (run / "marker").write_text("a fresh start wipes the run directory")
    run_trial(param)  # retried after it finished its budget: resumed at 256, nothing trained again
    assert (run / "marker").exists()

    def updates(rows: list[dict]) -> int:
        return max(r.get("learner/gradient_steps", 0) for r in rows)

    assert updates(records()) == updates(first) > 0 and records()[: len(first) - 1] == first[:-1]
    for checkpoint in (run / "checkpoints").glob("step-*"):
        (checkpoint / "driver.json").write_text("{}")  # every checkpoint damaged
    run_trial(param)
    assert not (run / "marker").exists() and not list((run / "checkpoints").glob("damaged-*"))  # afresh
    assert sorted(p.name for p in (run / "checkpoints").glob("step-*")) == ["step-000000128", "step-000000256"]


def test_a_grid_with_trials_short_of_their_budget_ends_with_a_failing_status(tmp_path, monkeypatch, capsys):
    """Ctrl-C or a trial that failed past its retries: `sacglam tune` prints the summary, then
    exits with status 1 naming the trials and the command that continues them (a job script must
    not read it as a success)."""
    from sacglam.cli import main
    from sacglam.experiments import results, tune_runner

    directory = tmp_path / "grid-cpu"
    directory.mkdir()
    (directory / "experiment.json").write_text(json.dumps({"incomplete": ["n_step=3,seed=1"]}))
    (directory / "summary.md").write_text("the summary")
    monkeypatch.setattr(tune_runner, "run_grid", lambda *args: directory)
    monkeypatch.setattr(results, "plot_experiment", lambda d: (d / "plot.png", d / "summary.md"))
    grid = _write(tmp_path, {"base": BASE})
    with pytest.raises(SystemExit) as stop:
        main(["tune", str(grid), "--storage", str(tmp_path)])
    assert "the summary" in capsys.readouterr().out
    assert "1 trial(s) failed or stopped before their budget: n_step=3,seed=1; continue them with " in str(
        stop.value.code
    ) and f"sacglam tune {grid} --form cpu --storage {tmp_path} --resume" in str(stop.value.code)


def test_a_trial_that_ended_at_its_time_limit_is_not_unfinished(tmp_path):
    """`time_limit_s` ends a trial by design (Tune records it as done; a resume would not continue
    it): not incomplete, while one whose records stop short for no such reason is."""
    from sacglam.experiments.results import incomplete_trials

    experiment = load_experiment(_write(tmp_path, {"base": BASE, "seeds": [0, 1, 2]}))
    budget = experiment.trials[0].train_config().total_env_steps
    rows = [
        {"trial": "seed=0", "env_steps": budget},
        {"trial": "seed=1", "env_steps": budget // 2, "run/time_limit_at": budget // 2},
        {"trial": "seed=2", "env_steps": budget // 2},
    ]
    assert incomplete_trials(experiment, rows) == ["seed=2"]
