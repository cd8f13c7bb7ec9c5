"""`run_pipeline(cfg)`: the one training entry point. A run of SAC-GLAM, SAC-GLAM+HER or PPO-GLAM
through the actor-learner pipeline (local or Ray), fresh or resumed, its directory a local path
or a URI (`sacglam.runtime.storage`)."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from dataclasses import replace

import torch

from sacglam.config import TrainConfig
from sacglam.learner.service import LearnerService
from sacglam.models.agent import TrainableStateMismatch
from sacglam.models.loading import bfloat16_on_cpu_warning, check_model
from sacglam.models.warm_start import warm_start_line
from sacglam.pipeline.components import build_local
from sacglam.pipeline.driver import Counters, PipelineDriver, restore
from sacglam.pipeline.metrics import MetricsLogger, tensorboard_command
from sacglam.report import METRICS_FILE
from sacglam.run_directory import (
    RunAlreadyComplete,
    RunDirectoryError,
    changed_settings,
    create_run_directory,
    reachable_run_directory,
    refuse_foreign_files,
    write_run_config,
)
from sacglam.runtime.checkpoint import CheckpointStore
from sacglam.runtime.handles import ExperienceStore, resolve
from sacglam.runtime.storage import StoragePath, download_dir, staging_dir, write_torch


def paper_settings_note(cfg: TrainConfig) -> str | None:
    """A note for a SAC run of a random-initialised (tiny) model on a protocol environment at the
    paper's SAC settings, which are sized for a pretrained LLM on a GPU: on such an environment the
    tiny model learns on a CPU with the sanity settings, and stays goal-blind for thousands of
    env steps with these (docs/guides/own-environment.md#what-the-first-run-tells-you). None otherwise."""
    from sacglam.config import SACConfig, env_is_built_in

    paper = {"sac": SACConfig(), "sac-her": SACConfig.with_her()}.get(cfg.algo)
    if paper is None or cfg.sac != paper or not cfg.agent.random_initialised or env_is_built_in(cfg.env.name):
        return None
    return (
        f"note: {cfg.algo} at the paper's settings (batch {paper.batch_size}, learning rates {paper.actor_lr:g} and "
        f"{paper.critic_lr:g}), sized for a pretrained LLM on a GPU; the tiny model learns a new environment "
        f"sooner on a CPU with tune_configs/runs/sanity_{cfg.algo.replace('-', '_')}.yaml's settings (--config it "
        "with your --env.name, or copy its sac and agent blocks into your config; "
        "docs/guides/own-environment.md#what-the-first-run-tells-you)"
    )


def run_pipeline(
    cfg: TrainConfig,
    on_chunk: Callable | None = None,
    announce: Callable[[str], None] = print,
    stop_when: Callable[[dict[str, float]], bool] | None = None,
    resume_hint: bool = True,
) -> dict[str, float]:
    """Train; returns the final evaluation. With `cfg.resume`, continue that run directory from
    its newest checkpoint (nothing after it is kept: metrics past it are dropped too).
    `stop_when(evaluation)`, if given, is asked after every evaluation (its metrics, with
    `env_steps`); once it returns True the run ends there, before its budget, checkpointed.
    An error once the run has started carries a note (`kept_note`) of what it kept and of the
    `sacglam train --resume` command, unless `resume_hint` is False (a Tune trial: the grid's own
    `--resume` retries it)."""
    if cfg.resume is not None:
        cfg = replace(cfg, output_dir=cfg.resume)
    run_dir = reachable_run_directory(cfg.output_dir)
    store = CheckpointStore(run_dir / "checkpoints", keep=cfg.pipeline.keep_checkpoints)
    latest, damaged = store.latest_intact() if cfg.resume is not None else (None, [])
    if cfg.resume is not None and latest is None:
        if damaged:
            found = "; ".join(f"{path.name}: {problem}" for path, problem in damaged)
            raise RunDirectoryError(
                f"{cfg.resume} holds no intact checkpoint to resume from ({found}); nothing was changed"
            )
        raise RunDirectoryError(f"{cfg.resume} holds no checkpoint to resume from (none in {store.root})")
    if latest is not None and (done := finished_at(latest, cfg.total_env_steps)) is not None:
        raise RunAlreadyComplete(
            f"{cfg.resume} is complete: it ended at its budget, {done} env steps, and total_env_steps is "
            f"{cfg.total_env_steps}; nothing was changed (to train it further, resume with a larger --total-env-steps)"
        )
    if cfg.resume is None and store.root.children():
        raise RunDirectoryError(
            f"{cfg.output_dir} already holds a run's checkpoints: continue it with --resume {cfg.output_dir}, "
            "or choose another --output-dir (nothing was changed)"
        )
    if cfg.resume is None:
        refuse_foreign_files(run_dir)
    # A model name that does not load fails here, in one line, before anything is written.
    check_model(cfg.agent.model, cfg.agent.tiny_vocabulary)
    cfg.env.spec().prepare()  # TextWorld's games, built here once rather than by every worker
    # On this machine (the local runner, or a Ray of the run's own): a cluster's nodes are not known here.
    slow_dtype = bfloat16_on_cpu_warning(cfg.agent.resolved_dtype, cfg.agent.resolved_device)
    if slow_dtype and cfg.address is None:
        announce(slow_dtype)
    if cfg.runner == "ray":  # a cluster too small for the run fails here too, before anything is written
        from sacglam.pipeline.ray_cluster import check_request

        check_request(cfg)
    for path, problem in damaged:  # the resume falls back to the newest intact checkpoint
        assert latest is not None
        moved = store.set_aside(path, latest)  # before the actors restore: they read the pointer
        print(
            f"sacglam: warning: checkpoint {path.name} is damaged ({problem}); resuming from {latest.name} "
            f"(the damaged one is in {moved})",
            file=sys.stderr,
        )
    # A fresh run in a directory an attempt that failed before its first checkpoint left (its
    # config.json): that attempt's records go (`kept_note` tells to rerun in place).
    earlier_attempt = cfg.resume is None and (run_dir / "config.json").exists()
    create_run_directory(run_dir)
    if cfg.resume is None:
        write_run_config(cfg)
        if (settings := paper_settings_note(cfg)) is not None:
            announce(settings)
    changed = changed_settings(cfg) if cfg.resume is not None else []
    if changed:
        announce(
            f"resuming with settings that differ from {run_dir / 'config.json'}: {'; '.join(changed)} "
            "(this session only: config.json keeps the run's own, so a later --resume needs them again)"
        )
    resumed_at = json.loads((latest / "driver.json").read_text())["env_steps"] if latest else None
    local = staging_dir(run_dir)  # metrics are appended here, and copied to a remote run_dir
    if not run_dir.is_local:
        shutil.rmtree(local, ignore_errors=True)
        if latest is not None:  # the earlier sessions' metrics, cut back to the checkpoint below
            download_dir(run_dir / "tensorboard", local / "tensorboard")
            if (run_dir / METRICS_FILE).is_file():
                (local / METRICS_FILE).write_bytes((run_dir / METRICS_FILE).read_bytes())
    kept_until = resumed_at if resumed_at is not None else (-1 if earlier_attempt else None)
    torch.manual_seed(cfg.seed)
    threads = torch.get_num_threads()  # the local runner's learner may set its own: given back at the end
    try:
        if cfg.runner == "ray":
            from sacglam.pipeline.ray_cluster import auth_note, build_ray

            parts = build_ray(cfg, store.root, resuming=latest is not None)
            if parts.dashboard_url:
                announce(f"Ray dashboard: {parts.dashboard_url} ({auth_note()}); run metrics are the sacglam_* series")
        else:
            parts = build_local(cfg, store.root, resuming=latest is not None)
    except BaseException:
        torch.set_num_threads(threads)
        raise
    logger: MetricsLogger | None = None
    try:
        if latest is not None:
            try:
                counters = restore(parts, latest)
            except TrainableStateMismatch as error:  # before the metrics are touched: nothing changes
                raise RunDirectoryError(resume_mismatch(run_dir, latest.name, changed, error)) from error
            stored = resolve(parts.storage.call(ExperienceStore.size))
            announce(
                f"resumed {run_dir} from {latest.name}: {counters.env_steps} env steps, {counters.updates} updates, "
                f"{stored} transitions in storage"
            )
        # the earlier sessions' records past the checkpoint go now, once the checkpoint has loaded
        logger = MetricsLogger(local, keep_until=kept_until, mirror=None if run_dir.is_local else run_dir)
        if latest is None:
            counters = Counters(
                next_checkpoint=cfg.pipeline.checkpoint_every or cfg.total_env_steps,
                next_eval=0 if cfg.eval_at_start else cfg.eval_every,
            )
            warm = resolve(parts.learners[0].call(LearnerService.warm_start))
            if warm:
                logger.log(0, warm)
                line = warm_start_line(warm, cfg.warm_start_target_kl, cfg.agent)
                if line:
                    announce(line)
        announce(f"curves, live: {tensorboard_command(local)}  (then open http://localhost:6006)")
        driver = PipelineDriver(cfg, parts, logger, store, counters, on_chunk, _progress_safe(announce), stop_when)
        try:
            final = driver.run()
        except Exception as error:  # the error's own line (or traceback) then says what the run kept
            if resume_hint:
                error.add_note(kept_note(store, run_dir))
            raise
        write_torch(run_dir / "learner.pt", resolve(parts.learners[0].call(LearnerService.state_dict)))
        return final
    finally:
        if logger is not None:
            logger.close()
        parts.close()
        torch.set_num_threads(threads)


def resume_mismatch(run_dir: StoragePath, checkpoint: str, changed: list[str], error: BaseException) -> str:
    """The one line of a resume whose settings build an agent the checkpoint's weights do not fit."""
    cause = getattr(error, "cause", None) or error  # Ray's RayTaskError carries the learner's error as `cause`
    detail = " ".join(str(cause.args[0] if cause.args else cause).split())
    differ = f"settings that differ from its config.json: {'; '.join(changed)}" if changed else "no setting differs"
    return (
        f"cannot resume {run_dir} with these settings: its checkpoint {checkpoint} holds weights of another agent "
        f"({detail}); {differ}. The model, LoRA, critic and algorithm settings cannot change on a resume: resume "
        "without changing them, or start a fresh run with another --output-dir (the run's checkpoints and records are kept as they were)"
    )


def kept_note(store: CheckpointStore, run_dir: StoragePath) -> str:
    """What a run that failed after it started kept, and how to go on once the cause is fixed."""
    location = run_dir.as_location()  # a URI keeps its options (endpoint, region)
    try:
        newest = store.latest()
        steps = json.loads((newest / "driver.json").read_text())["env_steps"] if newest is not None else None
        leftovers = newest is None and bool(store.root.children())  # a first checkpoint cut short
    except Exception:  # storage gone with the run: the error itself matters more
        return "whether the run kept a checkpoint could not be read"
    if leftovers:
        return f"the run stopped while writing its first checkpoint: once fixed, remove {location} and start again"
    if newest is None:
        return (
            f"the run stopped before its first checkpoint: once fixed, the same command starts it again in {location}"
        )
    return (
        f"the run is saved up to its newest checkpoint, {newest.name} ({steps} env steps): once fixed, "
        f"`sacglam train --resume {location}` continues from it"
    )


def finished_at(checkpoint: StoragePath, total_env_steps: int) -> int | None:
    """The env steps of `checkpoint` when it is the final checkpoint of a run that reached its
    budget and that budget is at least `total_env_steps` (the steps an on-policy run dropped do
    not count, as its schedule does not count them); None for any other checkpoint (a run killed,
    stopped early or at a time limit, which `--resume` continues)."""
    saved = json.loads((checkpoint / "driver.json").read_text())
    counted = saved["env_steps"] - saved.get("discarded_env_steps", 0)
    return int(saved["env_steps"]) if saved.get("finished") and counted >= total_env_steps else None


def _progress_safe(announce: Callable[[str], None]) -> Callable[[str], None]:
    """`announce`, or, when it is the plain `print`, a print that keeps a progress bar intact."""
    if announce is not print:
        return announce
    from tqdm.auto import tqdm

    return lambda line: tqdm.write(line, file=sys.stdout)
