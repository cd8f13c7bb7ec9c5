"""`sacglam tune <experiment>.yaml`: an experiment's grid as Ray Tune trials.

- One trial per grid point and seed (`tune.grid_search` over the validated trial list), each
  training through the project's one entry point (`sacglam.pipeline.run.run_pipeline`) in the trial's process.
- Resources: `tune.with_resources` with a placement group holding the trial's process and, when
  the trial's config uses `runner: ray`, one bundle per actor of its pipeline (the pipeline then
  places its actors in the trial's group instead of making its own).
- Every record the run logs goes to `ray.tune.report`; when the run has written a new pipeline
  checkpoint, it goes with the report as a `ray.tune.Checkpoint`, and a retried trial (a failure,
  or a resumed grid) continues from it instead of starting over.
- `--resume` restores an interrupted grid (`Tuner.restore`, errored trials resumed from their
  checkpoints); finished trials are kept.
- At the end the trials' records become one tidy table (`results.csv`, `results.parquet`).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from sacglam.errors import UserInputError
from sacglam.experiments.results import ExperimentNotFoundError, write_results_table
from sacglam.experiments.spec import Trial, load_experiment
from sacglam.pipeline.ray_cluster import connect


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
    from sacglam.pipeline.run import run_pipeline
    from sacglam.run_directory import RunDirectoryError
    from sacglam.runtime.checkpoint import CheckpointStore, damage, seal_step

    param = param["__trial__"]
    torch.set_num_threads(param["threads"])
    trial = Trial(**param["trial"])
    cfg = trial.train_config()
    run_dir = Path(tune.get_context().get_trial_dir()) / "run"
    store = CheckpointStore(run_dir / "checkpoints")
    restored = tune.get_checkpoint()
    if restored is not None:
        with restored.as_directory() as directory:  # the pipeline checkpoint it reported last
            source = Path(directory)
            problem = damage(source)
            if problem is not None:
                raise RunDirectoryError(f"the checkpoint Tune restores this trial from is damaged: {problem}")
            target = store.root / f"step-{seal_step(source):09d}"
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(source, target)
        (store.root / "latest").write_text(target.name)
        cfg = replace(cfg, resume=run_dir)
    else:
        shutil.rmtree(run_dir, ignore_errors=True)  # a (re)start from scratch
    cfg = replace(cfg, output_dir=run_dir, progress=False)
    reported = {"checkpoint": store.latest()}

    def report(env_steps: int, values: dict[str, Any]) -> None:
        metrics = {"env_steps": env_steps} | {k: v for k, v in values.items() if isinstance(v, (int, float))}
        latest = store.latest()
        checkpoint = None
        if latest is not None and latest != reported["checkpoint"]:
            reported["checkpoint"] = latest
            checkpoint = tune.Checkpoint.from_directory(str(latest))
        tune.report(metrics, checkpoint=checkpoint)

    with metrics_listener(report):
        run_pipeline(cfg, announce=lambda _: None)


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
    storage = Path(storage).resolve()
    name = f"{experiment.experiment}-{experiment.form}"
    experiment_dir = storage / name
    connect(address)
    params = [{"trial": asdict(t), "threads": experiment.resources.threads} for t in experiment.trials]
    bundles = trial_bundles(experiment.trials[0], experiment.resources)
    trainable = tune.with_resources(run_trial, tune.PlacementGroupFactory(bundles))
    if resume:
        if not tune.Tuner.can_restore(str(experiment_dir)):
            raise ExperimentNotFoundError(f"{experiment_dir} holds no Tune experiment to resume; run without --resume")
        tuner = tune.Tuner.restore(str(experiment_dir), trainable, resume_errored=True)
    else:
        if experiment_dir.exists():
            raise ExperimentExistsError(
                f"{experiment_dir} already holds this experiment: continue it with --resume, or pass another --storage"
            )
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
                storage_path=str(storage),
                failure_config=tune.FailureConfig(max_failures=experiment.max_failures),
                # a trial restarts from its newest checkpoint: older ones (each with its replay
                # snapshot) are not kept
                checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
                verbose=1,
            ),
        )
    grid = tuner.fit()
    (experiment_dir / "experiment.json").write_text(
        json.dumps(
            {
                "experiment": experiment.experiment,
                "form": form,
                "description": experiment.description,
                "metric": experiment.metric,
                "grid_keys": list(experiment.grid_keys),
                "source": str(path),
            },
            indent=2,
        )
    )
    results = [grid[i] for i in range(len(grid))]
    errors = [r for r in results if r.error is not None]
    write_results_table(experiment_dir, experiment, {_trial_name(r.config): Path(r.path) for r in results})
    if errors:
        print(
            f"{len(errors)} trial(s) failed: {', '.join(_trial_name(r.config) for r in errors)}; "
            f"rerun with --resume to retry them"
        )
    return experiment_dir


def _trial_name(config: dict | None) -> str:
    assert config is not None  # every trial of the grid has its parameters
    return config["__trial__"]["trial"]["name"]
