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
import json
import os
import sys
import time
import warnings
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

import tyro

from sacglam.cli import resolve
from sacglam.cli.resolve import resumed_config  # noqa: F401  (part of sacglam.cli: tests resume runs with it)
from sacglam.cli.usage import UsageError
from sacglam.cli.usage import one_line_errors as _one_line_errors  # noqa: F401  (tests read a box with it)
from sacglam.config import (
    DEFAULT_EVAL_OUTPUT,
    AgentConfig,
    EnvConfig,
    EvalConfig,
    TrainConfig,
    env_settings_read,
    json_values,
)
from sacglam.demo import DemoArgs, run_demo
from sacglam.errors import UserInputError, one_line_warnings, user_error_in_remote_text, with_notes
from sacglam.evaluation import episode_specs, format_success_table, run_episodes, success_by_goal_type
from sacglam.policies import EnvironmentExpert, RandomPolicy
from sacglam.run_directory import RunAlreadyComplete
from sacglam.types import Policy


class OutputPathError(UserInputError):
    """An output file the command cannot write."""


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
        changes["env"] = cfg.env  # the run's environment with the --env.* flags applied (`resolve`)
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
                f"{label} has no expert (an `expert_action()` method, docs/reference/environment-protocol.md): drop expert from --policies"
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
    head, sacglam.json and a model card (docs/guides/export-and-evaluation.md)."""

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
    and as an HTML page a browser opens (docs/guides/export-and-evaluation.md)."""

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


def parse(args: list[str]) -> Any:
    """`sacglam <command> [--config FILE.yaml] [--field value ...]`: the command's config (`resolve.parse`)."""
    return resolve.parse(args, {name: cls for name, (cls, _) in COMMANDS.items()})


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
