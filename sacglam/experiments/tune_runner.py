"""`sacglam tune <experiment>.yaml`: an experiment's grid as Ray Tune trials.

- One trial per grid point and seed (`tune.grid_search` over the validated trial list), each
  training through the project's one entry point (`sacglam.pipeline.run.run_pipeline`) in the trial's process.
- Resources: `tune.with_resources` with a placement group holding the trial's process and, when
  the trial's config uses `runner: ray`, one bundle per actor of its pipeline (the pipeline then
  places its actors in the trial's group instead of making its own).
- Storage: `--storage` is a local path or a URI (`s3://bucket/tune`, as Tune's `storage_path`).
  Each trial's pipeline writes its run directory there itself (`<storage>/<experiment>/<trial>/run`:
  checkpoints, replay snapshot, metrics), from whichever node its actors run on, so a trial whose
  replay actor sits on another node, or a trial retried on another node, finds its checkpoints.
- Every record the run logs goes to `ray.tune.report`. A retried trial (a failure, or a resumed
  grid) continues from the newest intact checkpoint of its run directory instead of starting
  over, as `sacglam train --resume` does (falling back past a damaged one, with a warning).
- `--resume` restores an interrupted grid (`Tuner.restore`, errored trials resumed from their
  checkpoints); finished trials are kept.
- At the end the trials' records become one tidy table (`results.csv`, `results.parquet`), in the
  experiment directory (for a URI storage: in a local copy, uploaded to the storage).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from sacglam.errors import UserInputError
from sacglam.experiments.results import ExperimentNotFoundError, incomplete_trials, load_table, write_results_table
from sacglam.experiments.spec import Trial, load_experiment
from sacglam.pipeline.ray_cluster import connect
from sacglam.report import METRICS_FILE
from sacglam.run_directory import reachable_run_directory
from sacglam.runtime.storage import StoragePath, is_uri, staging_dir, upload_dir


class ExperimentChangedError(UserInputError):
    """`--resume` of a grid whose file now makes other trials than the experiment was run with."""


def trials_fingerprint(trials: tuple[Trial, ...]) -> str:
    """A hash of the trials (names, coordinates, configs): what `--resume` must find unchanged."""
    text = json.dumps([asdict(t) for t in trials], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class ExperimentExistsError(UserInputError, FileExistsError):
    """A fresh grid asked for a directory that already holds that experiment."""


def trial_bundles(trial: Trial, resources) -> list[dict[str, float]]:
    """The trial's own process first, then its pipeline's actors when it runs on Ray."""
    head = {"CPU": resources.cpus} | ({"GPU": resources.gpus} if resources.gpus else {})
    cfg = trial.train_config()
    if cfg.runner != "ray":
        return [head]
    import ray

    from sacglam.pipeline.ray_cluster import plan

    return [head] + [b.resources() for b in plan(cfg, ray.cluster_resources())]


def run_trial(param: dict[str, Any]) -> None:
    """The Tune trainable: train one trial's config, reporting every logged record."""
    import ray.tune as tune
    import torch

    from sacglam.pipeline.metrics import metrics_listener
    from sacglam.pipeline.run import finished_at, run_pipeline
    from sacglam.runtime.checkpoint import CheckpointStore

    param = param["__trial__"]
    torch.set_num_threads(param["threads"])
    trial = Trial(**param["trial"])
    cfg = trial.train_config()
    run_dir = trial_run_dir(param["experiment_dir"], trial.name)
    cfg = replace(cfg, output_dir=run_dir.as_location(), progress=False)
    intact, _ = CheckpointStore(run_dir / "checkpoints").latest_intact()
    if intact is not None and finished_at(intact, cfg.total_env_steps) is not None:
        return  # retried after its run had ended at its budget: nothing is left to do (its records are written)
    if intact is not None:  # a retried trial: on from its newest intact checkpoint (a resume checks again)
        cfg = replace(cfg, resume=cfg.output_dir)
    else:
        run_dir.rmtree()  # a (re)start from scratch, also past checkpoints that are all damaged

    def report(env_steps: int, values: dict[str, Any]) -> None:
        tune.report({"env_steps": env_steps} | {k: v for k, v in values.items() if isinstance(v, (int, float))})

    with metrics_listener(report):
        run_pipeline(cfg, announce=lambda _: None, resume_hint=False)  # `sacglam tune --resume` retries it
    write_trial_report(run_dir)


def write_trial_report(run_dir: StoragePath) -> None:
    """The trial's `report.md` and `curves.png`, as `sacglam train` writes them: its lines (no
    learning signal, a held-out goal reported, no rise beyond noise) are read there, since a
    trial's own printed lines go nowhere."""
    from sacglam.report import write_report
    from sacglam.runtime.storage import staging_dir, upload_dir

    local = staging_dir(run_dir)  # the run directory itself, or the local copy of a URI run's metrics
    if not run_dir.is_local:
        (local / "config.json").write_bytes((run_dir / "config.json").read_bytes())
    write_report(local)
    if not run_dir.is_local:
        upload_dir(local, run_dir)


def experiment_storage(path: str | Path, form: str, storage: str | Path) -> StoragePath:
    """`<storage>/<experiment>-<form>`: where Tune and the trials keep the experiment."""
    experiment = load_experiment(path, form)
    return StoragePath(str(storage)) / f"{experiment.experiment}-{experiment.form}"


def trial_run_dir(experiment_dir: str, trial_name: str) -> StoragePath:
    """Where a trial's pipeline writes its run: `<experiment dir>/<trial>/run` (Tune's trial
    directory on a local storage path)."""
    return StoragePath(experiment_dir) / trial_name / "run"


def run_grid(
    path: str | Path,
    form: str = "cpu",
    storage: str | Path = "runs/tune",
    resume: bool = False,
    address: str | None = None,
) -> Path:
    """Run (or resume) the grid; returns the experiment directory holding the results table."""
    from ray import tune

    experiment = load_experiment(path, form)
    location = str(storage) if is_uri(storage) else str(Path(storage).resolve())
    name = f"{experiment.experiment}-{experiment.form}"
    experiment_dir = experiment_storage(path, form, storage)
    tune_path = experiment_dir.as_location()
    reachable_run_directory(tune_path)  # a bad URI fails here, in one line, before Ray starts
    connect(address)
    params = [
        {"trial": asdict(t), "threads": experiment.resources.threads, "experiment_dir": tune_path}
        for t in experiment.trials
    ]
    bundles = trial_bundles(experiment.trials[0], experiment.resources)
    trainable = tune.with_resources(run_trial, tune.PlacementGroupFactory(bundles))
    fingerprint = trials_fingerprint(experiment.trials)
    stored = experiment_dir / "experiment.json"
    if resume:
        if not tune.Tuner.can_restore(tune_path):
            raise ExperimentNotFoundError(f"{experiment_dir} holds no Tune experiment to resume; run without --resume")
        first = json.loads(stored.read_text()).get("fingerprint") if stored.is_file() else None
        if first is not None and first != fingerprint:  # Tune would rerun the grid it first saved, silently
            raise ExperimentChangedError(
                f"{path} (form {form}) now makes other trials than {experiment_dir} was run with: --resume continues "
                "the grid as it was first run; run the changed grid under another --storage, or undo the change"
            )
        tuner = tune.Tuner.restore(tune_path, trainable, resume_errored=True)
    else:
        if experiment_dir.exists() and not _only_a_failed_start(experiment_dir, tune_path):
            raise ExperimentExistsError(
                f"{experiment_dir} already holds this experiment: continue it with --resume, or pass another --storage"
            )
        experiment_dir.mkdir()
        stored.write_text(json.dumps({"source": str(path), "form": form, "fingerprint": fingerprint}, indent=2))
        tuner = tune.Tuner(
            trainable,
            param_space={"__trial__": tune.grid_search(params)},
            tune_config=tune.TuneConfig(
                max_concurrent_trials=experiment.max_concurrent,
                trial_name_creator=lambda t: _trial_name(t.config),
                trial_dirname_creator=lambda t: _trial_name(t.config),
            ),
            run_config=tune.RunConfig(
                name=name,
                storage_path=location,
                failure_config=tune.FailureConfig(max_failures=experiment.max_failures),
                verbose=1,
            ),
        )
    grid = tuner.fit()
    local = staging_dir(experiment_dir)  # the experiment directory, or a local copy of a URI one
    if not experiment_dir.is_local:
        shutil.rmtree(local, ignore_errors=True)  # no trial of an earlier experiment at that URI
    local.mkdir(parents=True, exist_ok=True)
    (local / "experiment.json").write_text(
        json.dumps(
            {
                "experiment": experiment.experiment,
                "form": form,
                "description": experiment.description,
                "metric": experiment.metric,
                "grid_keys": list(experiment.grid_keys),
                "source": str(path),
                "fingerprint": fingerprint,
            },
            indent=2,
        )
    )
    results = [grid[i] for i in range(len(grid))]
    errors = [r for r in results if r.error is not None]
    trial_dirs = {}
    for r in results:
        trial = _trial_name(r.config)
        trial_dirs[trial] = local / trial
        if not experiment_dir.is_local:  # the table reads each trial's metrics from local disk
            metrics = trial_run_dir(tune_path, trial) / METRICS_FILE
            if metrics.is_file():
                (local / trial / "run").mkdir(parents=True, exist_ok=True)
                (local / trial / "run" / METRICS_FILE).write_bytes(metrics.read_bytes())
    write_results_table(local, experiment, trial_dirs)
    incomplete = incomplete_trials(experiment, load_table(local))  # failed, interrupted (Ctrl-C) or not started
    incomplete += [name for r in errors if (name := _trial_name(r.config)) not in incomplete]  # failed past it
    info = json.loads((local / "experiment.json").read_text())
    (local / "experiment.json").write_text(json.dumps(info | {"incomplete": incomplete}, indent=2))
    if not experiment_dir.is_local:
        upload_dir(local, experiment_dir)
    if errors:
        print(f"{len(errors)} trial(s) failed: {', '.join(_trial_name(r.config) for r in errors)}")
    return local


def _only_a_failed_start(experiment_dir: StoragePath, tune_path: str) -> bool:
    """Whether `experiment_dir` holds only the `experiment.json` a start that failed before Tune
    saved anything wrote (no Tune state to resume): a fresh run may then start there again."""
    from ray import tune

    return not tune.Tuner.can_restore(tune_path) and [p.name for p in experiment_dir.children()] == ["experiment.json"]


def _trial_name(config: dict | None) -> str:
    assert config is not None  # every trial of the grid has its parameters
    return config["__trial__"]["trial"]["name"]
