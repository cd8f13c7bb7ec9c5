"""The `sacglam` command. Subcommands parse into the config dataclasses of `sacglam.config`
(tyro turns their field docstrings into `--help`) and dispatch to the job that runs them.

    sacglam demo   # the main job (make demo): tune_configs/runs/demo_*.yaml through Ray, one report
    sacglam evaluate [--episodes 400] [--variants simple full babyai-mixed] [--policies expert random]
    sacglam train --config tune_configs/runs/cpu_simple_sac_her.yaml [--seed 1] [--total-env-steps 25000] ...
    sacglam train --config tune_configs/runs/demo_smollm2.yaml [--address auto]
    sacglam train --resume runs/demo   # continue a killed run from its newest checkpoint
    sacglam tune tune_configs/experiments/nstep_buffer.yaml [--form cpu|gpu] [--resume]
    sacglam plot runs/tune/nstep_buffer-cpu
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import inspect
import io
import json
import os
import re
import sys
import time
import types
import typing
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

import tyro

from sacglam.config import (
    DEFAULT_EVAL_OUTPUT,
    AgentConfig,
    EnvConfig,
    EvalConfig,
    TrainConfig,
    env_settings_read,
    env_settings_read_by,
    json_values,
    not_read_because,
    unread_env_setting,
)
from sacglam.config_io import ConfigError, from_dict, load_yaml_config
from sacglam.demo import DemoArgs, run_demo
from sacglam.errors import UserInputError, one_line_warnings, user_error_in_remote_text, with_notes
from sacglam.evaluation import episode_specs, format_success_table, run_episodes, success_by_goal_type
from sacglam.policies import EnvironmentExpert, RandomPolicy
from sacglam.run_directory import RunAlreadyComplete
from sacglam.types import Policy


class OutputPathError(UserInputError):
    """An output file the command cannot write."""


class UsageError(UserInputError):
    """Command-line arguments that do not fit together."""


def make_policy(name: str, cfg: EvalConfig, env: EnvConfig) -> Policy | EnvironmentExpert:
    if name == "expert":
        return EnvironmentExpert(env)
    if name == "random":
        return RandomPolicy(cfg.seed)
    if name in ("llm-sampled", "llm-greedy"):
        import transformers

        from sacglam.models import GLAMAgent  # torch + transformers: only when an LLM is asked for
        from sacglam.models.policy import LLMPolicy

        transformers.utils.logging.disable_progress_bar()  # keep the evaluation's own bar readable
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)

        agent = _AGENTS.get(cfg.agent)
        if agent is None:
            _AGENTS.clear()  # one LLM agent per process, shared by the llm-* policies
            agent = _AGENTS[cfg.agent] = GLAMAgent(cfg.agent).eval()
        return LLMPolicy(agent, greedy=name == "llm-greedy", seed=cfg.seed)
    raise ValueError(f"unknown policy {name!r}; choose expert, random, llm-sampled or llm-greedy")


_AGENTS: dict[AgentConfig, Any] = {}  # the agent of the last agent config asked for


def policy_label(name: str, cfg: EvalConfig) -> str:
    """`llm-sampled` -> `smollm2-135m-sampled` (the model's name in tables)."""
    return name.replace("llm", cfg.agent.model, 1) if name.startswith("llm-") else name


def evaluate_run(cfg: EvalConfig) -> dict[str, Any]:
    """`sacglam evaluate --run DIR`: the run's trained agent, sampled and greedy, on the run's own
    evaluation episodes (or `--env.*`, `--episodes`), next to random play and the expert."""
    from sacglam.evaluation import (
        EVAL_SEED_OFFSET,
        OVERALL,
        summarize_evaluation,
        training_evaluation,
    )
    from sacglam.export import evaluation_of_weights, load_run_agent
    from sacglam.models.policy import run_agent_part

    assert cfg.run is not None
    run_cfg, agent, env_steps = load_run_agent(cfg.run)  # a bad folder fails here, before anything is written
    output = _run_evaluation_output(cfg)
    _check_output(output)
    changes: dict[str, Any] = {"eval_modes": ("sampled", "greedy")}
    if cfg.env_given:
        changes["env"] = cfg.env  # the run's environment with the --env.* flags applied (`parse`)
    if cfg.run_episodes is not None:
        changes["eval_episodes"] = cfg.run_episodes
    elif run_cfg.eval_episodes == 0:  # a run that never evaluated: --episodes' default
        changes["eval_episodes"] = cfg.episodes
    same_episodes = not cfg.env_given and "eval_episodes" not in changes
    own_env = json_values(asdict(run_cfg.env))
    run_cfg = replace(run_cfg, **changes)
    evaluated_env = json_values(asdict(run_cfg.env))
    # what differs from the run's environment, said in the header and kept in the JSON: the figures
    # are not the run's, and the file may sit in the run's folder beside its own
    env_changes = {k: v for k, v in evaluated_env.items() if own_env.get(k) != v}
    run_cfg.env.spec().prepare()  # an environment that does not answer as the protocol says: one line, now
    parts = training_evaluation(run_cfg)  # the run's own parts: episodes and sampling seeds
    trained = [run_agent_part(agent, part) for part in parts]
    figures = summarize_evaluation(parts, trained)
    seed = run_cfg.seed + EVAL_SEED_OFFSET
    rows: dict[str, dict[str, dict[str, float]]] = {}
    for env_cfg in dict.fromkeys(part.env for part in parts):  # train goals, and held-out ones if the run had them
        for mode in ("sampled", "greedy"):
            mine = [r for part, rs in zip(parts, trained) if part.env == env_cfg and part.mode == mode for r in rs]
            rows[f"{env_cfg.goals} / trained {mode}"] = success_by_goal_type(mine, env_cfg)
        specs = episode_specs(env_cfg, run_cfg.eval_episodes, seed)
        for name in ("random", "expert") if env_cfg.spec().has_expert else ("random",):
            results = run_episodes(make_policy(name, replace(cfg, seed=seed), env_cfg), env_cfg, specs, cfg.num_envs)
            rows[f"{env_cfg.goals} / {name}"] = success_by_goal_type(results, env_cfg)
    changed = ", ".join(f"{k} {json.dumps(v)}" for k, v in env_changes.items())
    print(
        f"{cfg.run} at {env_steps} env steps ({run_cfg.eval_episodes} episodes per goal set, the run's seed {run_cfg.seed})"
        + (f", on the run's environment with {changed}" if changed else "")
    )
    print(format_success_table(rows))
    report: dict[str, Any] = {
        "run": cfg.run,
        "env_steps": env_steps,
        "env": evaluated_env,
        "env_changes": env_changes,
        "episodes": run_cfg.eval_episodes,
        "evaluation": figures,
        "table": rows,
    }
    if same_episodes:
        own = evaluation_of_weights(cfg.run, env_steps)
        shared = [k for k, v in figures.items() if k.endswith(f"/{OVERALL}") and k in own]
        if own.get("env_steps") == env_steps and shared:  # the modes the run evaluated in
            report["run_own_evaluation"] = own
            same = all(own[k] == figures[k] for k in shared)
            print(f"the run's own evaluation at {env_steps} env steps: {'the same' if same else 'DIFFERENT'} figures")
        else:
            print(f"the run has no evaluation of these weights (env steps {env_steps}) to compare with")
    else:
        other = "another environment" if changed else "other episodes"
        print(f"not the run's evaluation ({other}): none of the run's figures to compare with")
    _write_output(output, report)
    return report


def _run_evaluation_output(cfg: EvalConfig) -> Path | None:
    """Where `evaluate --run` writes: `--output` when given, else `evaluation.json` in the run's
    (or the export's) folder where that is local, so evaluating a run never replaces another
    run's file or the baselines' `runs/evaluation.json`."""
    from sacglam.runtime.storage import StoragePath

    assert cfg.run is not None
    if cfg.output_given or cfg.output != DEFAULT_EVAL_OUTPUT or not StoragePath(cfg.run).is_local:
        return cfg.output
    return Path(StoragePath(cfg.run).local()) / "evaluation.json"


def _write_output(output: Path | None, report: dict[str, Any]) -> None:
    """The JSON of an evaluation, saying so when it replaces an earlier file."""
    if output is None:
        return
    replaced = output.exists()
    try:
        output.write_text(json.dumps(report, indent=2, default=str))
    except OSError as error:
        raise OutputPathError(f"cannot write {output} ({error.strerror}): choose another --output") from error
    print(f"wrote {output}{' (replacing the one there)' if replaced else ''}")


def _check_output(output: Path | None) -> None:
    """A bad --output fails before an evaluation runs, so no result is lost to it."""
    if output is None:
        return
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise OutputPathError(f"cannot write {output} ({error.strerror}): choose another --output") from error
    if output.is_dir():
        raise OutputPathError(f"{output} is a directory: --output takes a file name, e.g. {output / 'evaluation.json'}")
    if not os.access(output if output.exists() else output.parent, os.W_OK):
        raise OutputPathError(f"cannot write {output} (permission denied): choose another --output")


def evaluate(cfg: EvalConfig) -> dict[str, Any]:
    """Evaluate each policy on each variant's train and held-out test goals; print and return the
    success table (and write it as JSON when `cfg.output` is set)."""
    if cfg.run is not None:
        return evaluate_run(cfg)
    _check_output(cfg.output)
    environments = cfg.environments()
    for label, env in environments:  # an expert asked for by name must exist: say so before anything runs
        spec = env.spec()
        spec.prepare()
        if "expert" in cfg.policies and not spec.has_expert:
            raise UsageError(
                f"{label} has no expert (an `expert_action()` method, docs/environments.md): drop expert from --policies"
            )
    if any(name.startswith("llm-") for name in cfg.policies):
        from sacglam.models.loading import check_model

        check_model(cfg.agent.model)  # before the scripted policies run, not after
        untrained = (
            "random weights with no warm start: not the policy a run starts from, which a run's evaluation at 0 env "
            "steps measures"
            if cfg.agent.random_initialised
            else "its pretrained weights"
        )
        print(
            f"llm-* policies: {cfg.agent.model}, zero-shot ({untrained}; --agent.model picks another, "
            "and a trained run is evaluated with --run DIR)"
        )
    rows: dict[str, dict[str, dict[str, float]]] = {}
    report: dict[str, Any] = {"config": json_values(asdict(cfg)), "results": []}
    for variant, train_env in environments:
        policies = cfg.policies or tuple(
            p for p in ("expert", "random") if p != "expert" or train_env.spec().has_expert
        )
        ran = report.setdefault("policies_run", [])  # "config" keeps what was asked for (none: the defaults)
        ran += [p for p in policies if p not in ran]
        agent_cfg = cfg.agent
        wants_llm = any(p.startswith("llm-") for p in policies)
        if (
            wants_llm
            and agent_cfg.random_initialised
            and not agent_cfg.tiny_vocabulary
            and train_env.name != "playground-text"
        ):
            agent_cfg = replace(agent_cfg, tiny_vocabulary=train_env.spec().vocabulary())  # as a run builds it
        for env_cfg in (train_env, train_env.held_out) if train_env.has_held_out else (train_env,):
            specs = episode_specs(env_cfg, cfg.episodes, cfg.seed)
            for name in policies:
                label = f"{variant} / {env_cfg.goals} / {policy_label(name, cfg)}"
                start = time.perf_counter()
                results = run_episodes(
                    make_policy(name, replace(cfg, agent=agent_cfg), env_cfg),
                    env_cfg,
                    specs,
                    cfg.num_envs,
                    cfg.progress,
                    description=label,
                )
                seconds = time.perf_counter() - start
                rows[label] = success_by_goal_type(results, env_cfg)
                report["results"].append(
                    {
                        "variant": variant,
                        "goal_set": env_cfg.goals,
                        "policy": name,
                        "env": env_settings_read(vars(env_cfg)),  # what it read, not settings it never received
                        "success_by_goal_type": rows[label],
                        "mean_steps": sum(r.steps for r in results) / len(results),
                        "seconds": seconds,
                    }
                )
    print(
        "Success rate per goal type (episodes in parentheses; 'all' weights the types by their share of the goal set)"
    )
    print(format_success_table(rows))
    _write_output(cfg.output, report)
    return report


def train(cfg: TrainConfig) -> dict[str, float]:
    """Train and print the evaluation before and after. `--resume` of a run already complete
    changes nothing and returns (exit status 0), after writing the final files a run stopped
    right after its final checkpoint did not write (`learner.pt`, the report)."""
    import transformers

    transformers.utils.logging.disable_progress_bar()  # keep the run's own progress bar readable
    run_dir = cfg.resume if cfg.resume is not None else cfg.output_dir
    from sacglam.pipeline.run import run_pipeline
    from sacglam.runtime.storage import StoragePath, staging_dir, upload_dir

    try:
        final = run_pipeline(cfg)
    except RunAlreadyComplete as done:  # nothing to do is not a failure
        print(f"sacglam: {done.one_line()}", file=sys.stderr)
        if not _final_files_missing(StoragePath(run_dir)):
            return {}
        print("sacglam: its final files were not all written (it stopped after its final checkpoint): writing them")
        final = {}
    except KeyboardInterrupt:
        resumable = (StoragePath(run_dir) / "checkpoints" / "latest").exists()
        raise SystemExit(
            f"sacglam: interrupted; continue from the newest checkpoint with `sacglam train --resume {run_dir}`"
            if resumable
            else "sacglam: interrupted before the first checkpoint; nothing to resume"
        ) from None
    from sacglam.report import before_and_after, write_report

    storage = StoragePath(run_dir)
    local = staging_dir(storage)  # the run directory itself, or the local copy of a URI run's metrics
    if not storage.is_local:
        (local / "config.json").write_bytes((storage / "config.json").read_bytes())
    print(before_and_after(local))
    report = write_report(local)
    episodes = min(cfg.report_transcripts, cfg.eval_episodes)
    if episodes:
        # the final evaluation's first episodes (its episodes and seeds: `watch`), read as text. The
        # run is done and saved whatever happens here: a failure is a note, never a failed run.
        try:
            paths = record_transcripts(str(run_dir), episodes, "greedy", False, local / "transcripts")
        except Exception as error:  # any error: the training and its checkpoints are already safe
            print(f"note: no transcripts in the report ({type(error).__name__}: {' '.join(str(error).split())[:200]})")
        else:
            with report.open("a") as f:
                f.write(
                    f"\nTranscripts of the final evaluation's first {paths['episodes']} episodes (train goals, "
                    f"greedy; {paths['successes']} succeeded): [page](transcripts/{paths['html'].name}), "
                    f"[text](transcripts/{paths['text'].name}) (`sacglam watch` records more).\n"
                )
    if not storage.is_local:
        upload_dir(local, storage)
        report = storage / report.name  # type: ignore[assignment]
    print(f"report: {report}; metrics (JSONL, CSV, TensorBoard), config and checkpoints in {storage}")
    return final


def _final_files_missing(run: Any) -> bool:
    """Whether a complete local run lacks the files written after its final checkpoint; a missing
    `learner.pt` is restored from that checkpoint here (the same learner state, written twice)."""
    from sacglam.runtime.checkpoint import CheckpointStore

    if not run.is_local:
        return False  # a URI run's report is written from a local copy of its metrics that this process lacks
    if not (run / "learner.pt").exists():
        latest, _ = CheckpointStore(run / "checkpoints", keep=1).latest_intact()
        if latest is not None:
            (run / "learner.pt").write_bytes((latest / "learner.pt").read_bytes())
        return True
    return not (run / "report.md").exists()


@dataclass(frozen=True)
class TuneArgs:
    """Run an experiment grid of tune_configs/experiments/ with Ray Tune (one trial per grid point and seed)."""

    experiment: tyro.conf.Positional[Path]
    """The experiment file, e.g. tune_configs/experiments/nstep_buffer.yaml."""
    form: str = "cpu"
    """Which form of the experiment: `cpu` (this machine) or `gpu` (the paper's sizes)."""
    storage: str = "runs/tune"
    """Where Tune keeps the experiment (<storage>/<experiment>-<form>/): a local path, or a URI
    every node reaches (`s3://bucket/tune`); the results table and plot then go to a local copy
    (printed) and the URI."""
    resume: bool = False
    """Continue an interrupted grid: unfinished and errored trials resume from their checkpoints."""
    address: str | None = None
    """Ray cluster to join; None starts a local one."""


@dataclass(frozen=True)
class PlotArgs:
    """Plot an experiment made by `sacglam tune`: plot.png and summary.md in its directory."""

    directory: tyro.conf.Positional[Path]
    """The experiment directory, e.g. runs/tune/nstep_buffer-cpu."""
    metric: str | None = None
    """Metric to plot (default: the experiment's, or the sampled train-goal success)."""


@dataclass(frozen=True)
class ExportArgs:
    """Export a trained run's agent: a PEFT adapter (LoRA runs) or the whole model, the critic
    head, sacglam.json and a model card (docs/export.md)."""

    run: tyro.conf.Positional[str]
    """The run directory (a path or URI) written by `sacglam train`."""
    out: tyro.conf.Positional[str]
    """Where the export goes: a directory, as a path or a URI (file://, s3://, ...: written here, then uploaded)."""


def export(args: ExportArgs) -> str:
    import tempfile

    from sacglam.export import EXPORT_FILES, ExportError, export_run, public_location
    from sacglam.runtime.storage import STORAGE_ERRORS, StoragePath, upload_dir

    target = StoragePath(args.out)
    try:
        is_file = target.is_file()
        earlier = sorted(name for name in EXPORT_FILES if (target / name).exists())
    except STORAGE_ERRORS as error:  # an unreachable bucket, no permission
        raise ExportError(
            f"cannot reach {args.out} ({type(error).__name__}: {' '.join(str(error).split())})"
        ) from error
    if is_file:
        raise ExportError(f"{args.out} is a file: give a directory for the export")
    if earlier:  # an earlier export's files (or a README.md of the user's) would be overwritten or mixed
        raise ExportError(
            f"{args.out} already holds {', '.join(earlier)}, which the export writes: give a new directory, or "
            "remove those first (nothing was written)"
        )
    if target.is_local:
        export_run(args.run, target.local())
    else:  # written here, then uploaded: the target gets whole files only
        with tempfile.TemporaryDirectory(prefix="sacglam-export-") as tmp:
            written = export_run(args.run, Path(tmp) / "export", out_name=public_location(args.out))
            try:
                upload_dir(written, target)
            except STORAGE_ERRORS as error:
                raise ExportError(
                    f"cannot upload the export to {args.out} ({type(error).__name__}: {' '.join(str(error).split())})"
                ) from error
    names = [name for name in EXPORT_FILES if (target / name).exists()]  # not the folder's other files
    print(f"exported {args.run} to {target.as_location()}: {', '.join(sorted(names))}")
    return target.as_location()


@dataclass(frozen=True)
class WatchArgs:
    """Transcripts of a trained run's agent: episodes step by step (goal, observation, every
    candidate with its probability and Q, the action, the reward, the partner's reports) as text
    and as an HTML page a browser opens (docs/export.md)."""

    run: tyro.conf.Positional[str]
    """The run directory (a path or URI) written by `sacglam train`, or an export folder (`sacglam export`)."""
    episodes: int = 4
    """Episodes to record: the first of the run's evaluation episodes (goal types in turn)."""
    mode: Literal["greedy", "sampled"] = "greedy"
    """How the agent acts: its most probable candidate, or sampling (seeded)."""
    held_out: bool = False
    """Episodes of the held-out goal set instead of the train goals."""
    out: Path | None = None
    """Where the transcripts go (default: RUN/watch for a local run, else ./watch; RUN/transcripts holds the
    final evaluation's, which the run's report links to)."""


def watch(args: WatchArgs) -> dict[str, Any]:
    if args.episodes < 1:
        raise UsageError(f"--episodes must be >= 1, got {args.episodes}")
    local = "://" not in args.run
    # not RUN/transcripts: those are the final evaluation's, which the run's report links to
    out = args.out or (Path(args.run) / "watch" if local else Path("watch"))
    blocking = next((p for p in (out, *out.parents) if p.exists() and not p.is_dir()), None)
    if blocking is not None:  # said now, not after the episodes have run
        raise UsageError(f"--out {out}: {blocking} is a file; give a directory for the transcripts")
    paths = record_transcripts(args.run, args.episodes, args.mode, args.held_out, out)
    print(
        f"{paths['successes']} of {paths['episodes']} episodes succeeded; open {paths['html']} in a browser "
        f"({paths['text']} as text)"
    )
    return paths


def record_transcripts(run: str, episodes: int, mode: str, held_out: bool, out: Path) -> dict[str, Any]:
    """The first `episodes` of the run's evaluation episodes (its eval seed), played by its trained
    agent (a run directory or an export folder) and written to `out` as text, JSON and HTML."""
    from sacglam.evaluation import EVAL_SEED_OFFSET
    from sacglam.export import load_run_agent
    from sacglam.transcripts import record_episodes, write_transcripts

    cfg, agent, env_steps = load_run_agent(run)
    if held_out and not cfg.env.has_held_out:
        raise UsageError(f"the run's environment ({cfg.env.name}) has no held-out goal set: drop --held-out")
    env = cfg.env.held_out if held_out else cfg.env
    seed = cfg.seed + EVAL_SEED_OFFSET
    specs = episode_specs(env, episodes, seed)
    transcripts = record_episodes(agent, env, specs, greedy=mode == "greedy", seed=seed)
    title = f"{cfg.algo} on {env.name} ({env.goals}), {cfg.agent.model}, {env_steps} env steps, {mode}"
    paths = write_transcripts(transcripts, out, title)
    return {**paths, "episodes": len(transcripts), "successes": sum(t.success for t in transcripts)}


def tune(args: TuneArgs) -> Path:
    from sacglam.experiments.results import plot_experiment
    from sacglam.experiments.tune_runner import experiment_storage, run_grid
    from sacglam.runtime.storage import upload_dir

    directory = run_grid(args.experiment, args.form, args.storage, args.resume, args.address)
    png, summary = plot_experiment(directory)
    print(summary.read_text())
    print(f"results: {directory / 'results.csv'} (also .parquet); plot: {png}; summary: {summary}")
    remote = experiment_storage(args.experiment, args.form, args.storage)
    if not remote.is_local:  # `directory` is the local copy
        upload_dir(directory, remote)
        print(f"and in {remote}")
    incomplete = json.loads((directory / "experiment.json").read_text()).get("incomplete", [])
    if incomplete:  # the summary counts them as unfinished; a script must not read this as success
        raise SystemExit(
            f"sacglam: {len(incomplete)} trial(s) failed or stopped before their budget: "
            f"{', '.join(incomplete)}; continue them with `sacglam tune {args.experiment} --form {args.form} "
            f"--storage {args.storage} --resume`"
        )
    return directory


def plot(args: PlotArgs) -> None:
    from sacglam.experiments.results import plot_experiment

    png, summary = plot_experiment(args.directory, args.metric)
    print(summary.read_text())
    print(f"plot: {png}; summary: {summary}")


def demo(args: DemoArgs) -> Path:
    return run_demo(args, train)


COMMANDS = {
    "demo": (DemoArgs, demo),
    "evaluate": (EvalConfig, evaluate),
    "export": (ExportArgs, export),
    "watch": (WatchArgs, watch),
    "train": (TrainConfig, train),
    "tune": (TuneArgs, tune),
    "plot": (PlotArgs, plot),
}


_DESCRIPTIONS = {  # what `--help` says above the options: the class's docstring and the flags tyro does not list
    TrainConfig: (
        f"{inspect.cleandoc(TrainConfig.__doc__ or '')}\n\n--config FILE.yaml: a run config (tune_configs/runs/, docs/configs.md) gives the "
        "defaults; the flags below override it. --resume DIR alone continues a run with its own config."
    ),
    EvalConfig: (
        f"{inspect.cleandoc(EvalConfig.__doc__ or '')}\n\n--config FILE.yaml: a run config whose environment (and agent) to evaluate; "
        "with --run DIR, its env block only, which changes the run's environment unless it names another (the agent "
        "is the run's); the flags below override it."
    ),
}


def parse(args: list[str]) -> EvalConfig | TrainConfig:
    """`<command> [--config FILE.yaml] [--field value ...]`: the YAML file gives the defaults,
    flags override them."""
    if not args or args[0] not in COMMANDS:
        return _one_line_errors(
            "sacglam",
            tyro.extras.subcommand_cli_from_dict,
            {name: cls for name, (cls, _) in COMMANDS.items()},
            prog="sacglam",
            args=args,
        )
    cls, _ = COMMANDS[args[0]]
    rest = list(args[1:])
    _refuse_mapping_flags(cls, rest)
    if cls in (TrainConfig, EvalConfig) and (named := _env_name_named(rest)) is not None:
        _refuse_unread_env_flags(named, rest)  # now, before a config collects the environment's words
    default: EvalConfig | TrainConfig | None = None
    if cls is TrainConfig:
        _refuse_output_dir_on_resume(rest)
    if cls is TrainConfig and "--resume" in rest and "--config" not in rest:
        default = resumed_config(rest)
    from_file: dict[str, Any] = {}
    if cls is EvalConfig and "--config" in rest and any(a == "--run" or a.startswith("--run=") for a in rest):
        default = _file_environment_on_run(rest)  # takes --config FILE out of `rest`
    if "--config" in rest:
        at = _config_flag_at(rest)
        default = evaluation_of_run(rest[at + 1]) if cls is EvalConfig else None
        try:
            from_file = _yaml_mapping(rest[at + 1])
        except Exception:  # a missing or broken file: load_yaml_config below says what is wrong
            from_file = {}
        env_block = from_file.get("env")  # the file's own environment (one a flag names instead gets none of it)
        named = env_block.get("name", "playground-text") if isinstance(env_block, dict) else None
        if isinstance(env_block, dict) and _last_flag_value(rest, "--env.name") in (None, named):
            if unread := unread_env_setting(env_block):
                raise UsageError(f"{rest[at + 1]}: {unread}")
        mapping = from_file
        if cls is TrainConfig and from_file and _changes_model_or_env(rest) and not _words_in(from_file):
            # the file's environment would have its words collected (random play: seconds to a minute)
            # only for flags to replace it: `_resolve_again` collects the final environment's
            agent = from_file["agent"] if isinstance(from_file.get("agent"), dict) else {}
            mapping = {**from_file, "agent": {**agent, "tiny_vocabulary": [_UNRESOLVED]}}
            default = from_dict(TrainConfig, mapping, where=rest[at + 1])
        flag_algo = _last_flag_value(rest, "--algo")
        if cls is TrainConfig and from_file and flag_algo is not None and flag_algo != from_file.get("algo"):
            # the method's own defaults under what the file sets, as `algo:` in the file would get
            # (`TrainConfig.nested_defaults`: `ppo` a value head unless the file names a critic)
            with contextlib.suppress(ConfigError):  # the file names what the method does not fit: the
                # flags given with it may fit them together (`--agent.critic value`); tyro says if not
                default = from_dict(TrainConfig, {**mapping, "algo": flag_algo}, where=rest[at + 1])
                from_file = {**from_file, "algo": flag_algo}
        default = default or load_yaml_config(cls, rest[at + 1])
        del rest[at : at + 2]
    if cls is TrainConfig and default is None and (named_by_flags := _method_and_environment(rest)):
        # their own defaults, as a run config naming them gets (`TrainConfig.nested_defaults`); the
        # model's and environment's defaults are worked out once, for the final ones (`_resolve_again`)
        from_file = named_by_flags
        placeholder = {**named_by_flags, "agent": {"tiny_vocabulary": [_UNRESOLVED]}}
        try:
            default = from_dict(TrainConfig, placeholder, where=_FLAGS)
        except ConfigError as error:
            raise ConfigError(_without_location(str(error))) from error
    if cls is TrainConfig:
        rest = _goal_set_for_another_environment(rest, from_file)
    if cls is EvalConfig and any(a == "--run" or a.startswith("--run=") for a in rest):
        if "--config" not in args:  # --env.* flags change the run's environment, not the default one
            default = _run_environment(rest, default)
    if cls is EvalConfig and any(a.startswith("--env.") for a in rest):
        default = replace(default if isinstance(default, EvalConfig) else EvalConfig(), env_given=True)
    parsed = _one_line_errors(
        f"sacglam {args[0]}",
        tyro.cli,
        cls,
        default=default,
        args=rest,
        prog=f"sacglam {args[0]}",
        description=_DESCRIPTIONS.get(cls),
    )
    if isinstance(parsed, (TrainConfig, EvalConfig)):
        _refuse_unread_env_flags(parsed.env.name, rest)
    if isinstance(parsed, TrainConfig) and from_file:
        parsed = _resolve_again(parsed, from_file, rest)
    if isinstance(parsed, EvalConfig) and parsed.run is not None:
        _refuse_flags_the_run_decides(rest)
        if any(a.startswith("--episodes") for a in rest):
            parsed = replace(parsed, run_episodes=parsed.episodes)  # given: it replaces the run's eval_episodes
        if any(a == "--output" or a.startswith("--output=") for a in rest):
            parsed = replace(parsed, output_given=True)  # kept as given, even when it is the default path
    return parsed


def _refuse_flags_the_run_decides(flags: list[str]) -> None:
    """`evaluate --run` evaluates the run's agent, sampled and greedy, next to random play and the
    expert: a flag that picks policies, variants or another agent would be ignored, so it is refused."""
    ignored = [f.split("=", 1)[0] for f in flags if f.split("=", 1)[0] in ("--policies", "--variants")]
    ignored += [f.split("=", 1)[0] for f in flags if f.startswith("--agent.")]
    if ignored:
        names = list(dict.fromkeys(ignored))
        raise UsageError(
            f"{', '.join(names)} {'does' if len(names) == 1 else 'do'} not apply with --run: it evaluates the run's own agent, sampled "
            "and greedy, next to random play and the expert; drop the flag, or evaluate baselines without --run"
        )


def _refuse_output_dir_on_resume(flags: list[str]) -> None:
    """`--resume DIR` continues the run where it is: an `--output-dir` elsewhere would be ignored."""
    resumed, output = _last_flag_value(flags, "--resume"), _last_flag_value(flags, "--output-dir")
    if resumed is None or output is None or _same_location(resumed, output):
        return
    raise UsageError(
        f"--resume {resumed} continues the run in its own directory, so --output-dir {output} would not be used: "
        "leave --output-dir out (to continue it elsewhere, copy the run directory there and resume the copy)"
    )


def _same_location(a: str, b: str) -> bool:
    """Whether two run locations name the same directory (local paths compared resolved)."""
    if "://" in a or "://" in b:
        return a.rstrip("/") == b.rstrip("/")
    return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()


def _last_flag_value(flags: list[str], flag: str) -> str | None:
    """The value the last `flag VALUE` or `flag=VALUE` among `flags` gives, if any does."""
    value = None
    for i, f in enumerate(flags):
        if f == flag and i + 1 < len(flags):
            value = flags[i + 1]
        elif f.startswith(flag + "="):
            value = f.split("=", 1)[1]
    return value


def _env_name_named(flags: list[str]) -> str | None:
    """The environment `--env.name` or the `--config` file's `env.name` names, if either does."""
    if (name := _last_flag_value(flags, "--env.name")) is not None:
        return name
    if "--config" in flags and flags.index("--config") + 1 < len(flags):
        try:
            env = _yaml_mapping(flags[flags.index("--config") + 1]).get("env")
        except Exception:  # a missing or broken file: the parse says what is wrong
            return None
        if isinstance(env, dict) and isinstance(env.get("name"), str):
            return env["name"]
    return None


def _refuse_unread_env_flags(env_name: str, flags: list[str]) -> None:
    """An `--env.*` flag that the named environment never reads (`--env.max-steps` for a
    `module:Class` environment, `--env.level` for Playground-Text) would change nothing, silently:
    refuse it, saying which environments read it and where the environment's own settings go."""
    read = set(env_settings_read_by(env_name))
    for flag in flags:
        if not flag.startswith("--env."):
            continue
        name = flag.split("=", 1)[0].removeprefix("--env.").replace("-", "_")
        if name in read or name not in {f.name for f in dataclasses.fields(EnvConfig)}:
            continue  # read, or not a setting at all (the parser has said so already)
        because = not_read_because(env_name, name, kwargs_place="a run config's env.kwargs")
        raise UsageError(f"{flag.split('=', 1)[0]} {because}")


def _mapping_keys(cls: type, prefix: str = "") -> list[str]:
    """The dotted keys of `cls`'s mapping fields, nested configs included (`env.kwargs`): the
    command line's parser cannot read a mapping, so the configs hide these from it."""
    hints = typing.get_type_hints(cls, include_extras=True)
    keys = []
    for field in dataclasses.fields(cls):
        hint = hints[field.name]
        if typing.get_origin(hint) is typing.Annotated:
            hint = typing.get_args(hint)[0]
        options = (
            [a for a in typing.get_args(hint) if a is not type(None)] if isinstance(hint, types.UnionType) else [hint]
        )
        if any(typing.get_origin(a) is dict for a in options):
            keys.append(prefix + field.name)
        elif len(options) == 1 and isinstance(options[0], type) and dataclasses.is_dataclass(options[0]):
            keys += _mapping_keys(options[0], f"{prefix}{field.name}.")
    return keys


def _refuse_mapping_flags(cls: type, flags: list[str]) -> None:
    """A mapping field given as a flag (`--env.kwargs '{...}'`, `--env.kwargs.max-steps 2`): say
    where it goes instead of tyro's bare "Unrecognized options"."""
    for key in _mapping_keys(cls):
        flag = "--" + key.replace("_", "-")
        if any((f.split("=", 1)[0].replace("_", "-") + ".").startswith(flag + ".") for f in flags):
            parts = key.split(".")
            yaml = "".join(f"{p}: {{" for p in parts) + "..." + "}" * len(parts)
            raise UsageError(
                f"{flag} is a mapping, set in a run config, not on the command line: write `{yaml}` in a "
                "YAML file and pass --config FILE (other flags still override it)"
            )


def _method_and_environment(flags: list[str]) -> dict[str, Any]:
    """The method and environment flags name when their defaults differ from the default run's
    (`--algo sac` or `ppo`, an `--env.name` other than Playground-Text), as a run config's keys."""
    named: dict[str, Any] = {}
    if (algo := _last_flag_value(flags, "--algo")) in ("sac", "ppo"):
        named["algo"] = algo
    if (env := _last_flag_value(flags, "--env.name")) not in (None, "playground-text"):
        named["env"] = {"name": env}
    return named


def _goal_set_for_another_environment(flags: list[str], from_file: dict[str, Any]) -> list[str]:
    """`--env.name` naming another environment than Playground-Text keeps the goal set the file
    (or the default run: the simplified task's `simple-train`) gave, which only Playground-Text
    has: add `--env.goals train` unless the flags set the goal set themselves."""
    name = _last_flag_value(flags, "--env.name")
    if name is None or name == "playground-text" or any(f.startswith("--env.goals") for f in flags):
        return flags
    env = from_file.get("env")
    goals = str(env.get("goals", TrainConfig().env.goals) if isinstance(env, dict) else TrainConfig().env.goals)
    return [*flags, "--env.goals", "train"] if goals.startswith("simple-") else flags


def _yaml_mapping(path: str) -> dict[str, Any]:
    import yaml

    data = yaml.safe_load(Path(path).read_text())
    return data if isinstance(data, dict) else {}


_UNRESOLVED = "<unresolved>"  # a placeholder vocabulary, replaced before the config is used


def _changes_model_or_env(flags: list[str]) -> bool:
    return any(f.startswith(("--env.", "--agent.model")) for f in flags)


def _words_in(from_file: dict[str, Any]) -> bool:
    agent = from_file.get("agent")
    return isinstance(agent, dict) and "tiny_vocabulary" in agent


def _resolve_again(cfg: TrainConfig, from_file: dict[str, Any], flags: list[str]) -> TrainConfig:
    """The defaults a `TrainConfig` works out from its model and environment were worked out for
    the file's values; flags may have changed the model or the environment since: work them out
    again unless the file or a flag set them."""
    agent_in_file = from_file["agent"] if isinstance(from_file.get("agent"), dict) else {}
    steps_given = "warm_start_steps" in from_file or "--warm-start-steps" in flags
    words_given = "tiny_vocabulary" in agent_in_file or "--agent.tiny-vocabulary" in flags
    rank_given = "lora_r" in agent_in_file or any(f.startswith("--agent.lora-r") for f in flags)
    end_given = "end_of_action" in agent_in_file or any(f.startswith("--agent.end-of-action") for f in flags)
    end_given = end_given or "--agent.no-end-of-action" in flags
    norm_given = "critic_input_norm" in agent_in_file or any(f.startswith("--agent.critic-input-norm") for f in flags)
    return cfg.resolved_again(
        warm_start_steps=not steps_given,
        vocabulary=not words_given,
        lora_r=not rank_given,
        end_of_action=not end_given,
        critic_input_norm=not norm_given,
    )


_FLAGS = "the command line"  # where a config built from flags alone comes from, for `_without_location`


def _without_location(message: str) -> str:
    """A config error about flags, without the location a config file's error gives ("<file>:env:
    ..."): the user typed the flag, and a message that names the setting (`env.name 'x': ...`)
    says the rest; one that does not keeps its block (`env: ...`)."""
    rest = message.removeprefix(f"{_FLAGS}:").removeprefix(f"{_FLAGS}").lstrip(": ")
    block, sep, text = rest.partition(": ")
    return text if sep and text.startswith(f"{block}.") else rest


_BOX = re.compile(r"\x1b\[[0-9;]*m|[╭╮╰╯│┃]")  # terminal colours and box borders


def _one_line_errors(command: str, cli: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """Run a tyro parser; its rejection of a flag (a box of several lines on stderr) becomes one
    `UsageError` line: the box's message, then where the help is. Help and success pass through."""
    captured = io.StringIO()
    asks_help = any(a in ("-h", "--help") for a in kwargs.get("args") or ())
    try:
        # unless help was asked for, the box is read here, not shown: drawn wide, no flag in it wraps
        with contextlib.redirect_stderr(captured), _columns(None if asks_help else 1000):
            parsed = cli(*args, **kwargs)
        sys.stderr.write(captured.getvalue())  # warnings of a successful parse still reach the user
        return parsed
    except SystemExit as stop:
        if stop.code in (0, None):
            sys.stderr.write(captured.getvalue())
            raise
        # A config's construction that failed on something other than a setting's value (an
        # environment that breaks the protocol, a module that does not import): tyro reports it as
        # a setting it could not parse; the error says what is wrong itself, and `--help` cannot help.
        cause = _user_error_behind(stop)
        if cause is not None:
            raise cause from None
        # The box: a top border with the title, the message (wrapped over rows), a rule, the help.
        rows = [_BOX.sub("", line).strip() for line in captured.getvalue().splitlines()[1:]]
        message: list[str] = []
        for row in rows:
            if _is_rule(row):
                if message:
                    break
                continue  # the rule under the title, where the box is drawn without borders (no terminal)
            message.append(row)
        text = " ".join(" ".join(message).split()) or f"invalid arguments (exit status {stop.code})"
        close = _suggested_flags(rows, text)
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        raise UsageError(f"{text}{hint} (`{command} --help` lists every option)") from None


def _is_rule(row: str) -> bool:
    """A horizontal rule of tyro's box: drawn with box characters on a terminal, dashes elsewhere."""
    return bool(row) and set(row) <= set("─━- ")


def _suggested_flags(rows: list[str], message: str) -> list[str]:
    """The flags tyro's box suggests (its "Perhaps you meant:" section: rows of a flag, or a flag
    and its negation, with its metavar, each followed by its help) for the first unrecognised one
    in `message`, closest first, at most two."""
    if "Perhaps you meant:" not in rows:
        return []
    offered = []
    for row in rows[rows.index("Perhaps you meant:") + 1 :]:
        if _is_rule(row):
            break
        if row.startswith("-"):  # a flag's row ("--progress, --no-progress"), not its help
            offered += [flag for flag in re.findall(r"--[\w.-]+", row) if flag not in offered]
    unknown = re.search(r"Unrecognized options: (--[\w.-]+)", message)
    if unknown is None:
        return offered[:2]
    return difflib.get_close_matches(unknown.group(1), offered, n=2, cutoff=0.0)


@contextlib.contextmanager
def _columns(width: int | None) -> Iterator[None]:
    """`COLUMNS` set to `width` (the width tyro draws its boxes at) for the block; None: as it is."""
    if width is None:
        yield
        return
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(width)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = before


def _user_error_behind(error: BaseException) -> UserInputError | None:
    """The `UserInputError` that `error` was raised while handling (its cause, or its context
    unless that was suppressed with `raise ... from None`), followed back; None if there is none."""
    behind: BaseException | None = error
    while behind is not None and not isinstance(behind, UserInputError):
        behind = behind.__cause__ or (None if behind.__suppress_context__ else behind.__context__)
    return behind


def _file_environment_on_run(flags: list[str]) -> EvalConfig:
    """`evaluate --run DIR --config FILE`: the environment FILE's `env` block gives (the agent is
    the run's, so nothing else in FILE applies). A block that names another environment than the
    run's is that environment, its settings over the defaults; one that names none, or the run's
    own, changes the run's environment as `--env.*` flags do. `--config FILE` is taken out of
    `flags`; a file without an `env` block, or with a setting its environment does not read, is
    refused in one line."""
    from sacglam.export import run_config_of

    at = _config_flag_at(flags)
    path = flags[at + 1]
    try:
        block = _yaml_mapping(path).get("env")
    except Exception as error:  # a missing or broken file
        raise UsageError(
            f"cannot read --config {path} ({type(error).__name__}: {' '.join(str(error).split())})"
        ) from error
    if not isinstance(block, dict):
        raise UsageError(
            f"--config {path} has no env block, and with --run a config gives only the environment to evaluate on "
            "(the agent is the run's): add an env block, or drop --config"
        )
    del flags[at : at + 2]
    run = run_config_of(_run_flag_value(flags))
    if run is None:  # the evaluation says what is wrong with the run
        return EvalConfig(env=from_dict(EnvConfig, block, where=f"{path}: env"), env_given=True)
    if "name" in block and block["name"] != run.env.name:
        env = from_dict(EnvConfig, block, where=f"{path}: env")
    else:
        if unread := unread_env_setting({**block, "name": run.env.name}):
            raise UsageError(f"{path}: {unread}")
        own = json_values(asdict(run.env))  # as a file writes it
        env = from_dict(EnvConfig, own | block, where=f"{path}: env")
    return EvalConfig(env=env, env_given=True)


def _config_flag_at(flags: list[str]) -> int:
    """Where `--config` is among `flags`, refused in one line when no file follows it."""
    at = flags.index("--config")
    if at + 1 >= len(flags):
        raise UsageError("--config needs a YAML file, e.g. --config tune_configs/runs/cpu_simple_sac_her.yaml")
    return at


def _run_flag_value(flags: list[str]) -> str:
    """The DIR of `--run DIR` (or `--run=DIR`) among `flags`."""
    at = next(i for i, f in enumerate(flags) if f == "--run" or f.startswith("--run="))
    return flags[at].split("=", 1)[1] if "=" in flags[at] else (flags[at + 1] if at + 1 < len(flags) else "")


def _run_environment(flags: list[str], default: Any) -> EvalConfig:
    """`evaluate --run DIR`: DIR's environment as the default, so that `--env.*` flags change it
    (DIR a run directory or an export folder)."""
    from sacglam.export import run_config_of

    base = default if isinstance(default, EvalConfig) else EvalConfig()
    run = run_config_of(_run_flag_value(flags))
    return base if run is None else replace(base, env=run.env)  # None: the evaluation says what is wrong


def evaluation_of_run(path: str) -> EvalConfig | None:
    """`sacglam evaluate --config RUN.yaml`: a run config's environment and agent (without its
    critic: the policies evaluated need none), or None when the file is not a run config."""
    import dataclasses

    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError):
        return None  # load_yaml_config says what is wrong with the file
    run_only = {f.name for f in dataclasses.fields(TrainConfig)} - {f.name for f in dataclasses.fields(EvalConfig)}
    if not isinstance(data, dict) or not run_only & set(data):
        return None
    run = load_yaml_config(TrainConfig, path)
    words_given = isinstance(data.get("agent"), dict) and "tiny_vocabulary" in data["agent"]
    agent = replace(run.agent, critic="none", tiny_vocabulary=run.agent.tiny_vocabulary if words_given else ())
    return EvalConfig(env=run.env, env_given=True, agent=agent, seed=run.seed)


def resumed_config(args: list[str]) -> TrainConfig:
    """`--resume DIR` without `--config`: the run's own config (DIR/config.json); flags still override."""
    at = args.index("--resume")
    if at + 1 >= len(args):
        raise UsageError("--resume needs the run directory to continue, e.g. --resume runs/demo")
    from sacglam.runtime.saved_config import saved_run_config

    run_dir = args[at + 1]
    data, saved = saved_run_config(run_dir, "--resume takes a directory written by `sacglam train`")
    data["resume"] = run_dir
    return from_dict(TrainConfig, data, where=saved)


def main(args: list[str] | None = None) -> None:
    """Parse and run a subcommand. An error the user can fix (`UserInputError`: a config, a model,
    a directory, a cluster) ends the command with its message on one line and exit status 2; any
    other exception is a bug and keeps its traceback."""
    formatwarning = warnings.formatwarning  # put back when the command returns (a caller's own process)
    one_line_warnings()
    try:
        try:
            cfg = parse(sys.argv[1:] if args is None else list(args))
        except BrokenPipeError:  # the reader of `--help` went away (`sacglam train --help | head`): stop quietly
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # so that the exit's flush of stdout does not fail again
            raise SystemExit(1) from None
        for cls, run in COMMANDS.values():
            if isinstance(cfg, cls):
                run(cfg)  # type: ignore[operator]
    except UserInputError as error:
        _close_progress_bars()
        _leave_ray()
        print(f"sacglam: {error.one_line()}", file=sys.stderr)
        raise SystemExit(2) from None
    except Exception as error:
        ray_exceptions = sys.modules.get("ray.exceptions")  # only a run that started Ray can raise its errors
        if ray_exceptions is None or not isinstance(error, ray_exceptions.RayError):
            raise
        message = user_error_in_remote_text(str(error))  # e.g. an actor that died in its constructor
        if message is None:
            raise
        message = with_notes(message, error)  # what the failed run kept (`run_pipeline`)
        _close_progress_bars()
        _leave_ray()
        print(f"sacglam: {message}", file=sys.stderr)
        raise SystemExit(2) from None
    finally:
        warnings.formatwarning = formatwarning


def _leave_ray() -> None:
    """Leave (or stop) the Ray session a failed run started, before its error line is printed: an
    actor that died of the error wrote its own traceback, which Ray streams to this terminal a
    moment later, after the line, burying it; leaving stops the stream, and the actor's log keeps
    the traceback (/tmp/ray/session_latest/logs)."""
    ray = sys.modules.get("ray")  # only a run that used Ray has imported it
    with contextlib.suppress(Exception):  # the error line matters more than a clean exit of Ray
        if ray is not None and ray.is_initialized():
            ray.shutdown()


def _close_progress_bars() -> None:
    """Close the progress bars an error left open (an evaluation's, a run's), so that its message
    starts a line of its own instead of following the bar's last figures (a bar that disappears
    when done clears its line; one that stays ends it)."""
    bars = sys.modules.get("tqdm.std")  # imported by whatever showed a bar
    for bar in list(getattr(getattr(bars, "tqdm", None), "_instances", ())):
        bar.close()


if __name__ == "__main__":
    main()
