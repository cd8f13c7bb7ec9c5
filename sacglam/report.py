"""A run's report: `report.md` (success before and after, per goal set and mode, and the last
training figures) and `curves.png` (evaluation success and training success against env steps),
written into the run directory from its `metrics.jsonl`; and the before -> after lines the CLI
prints at the end of a run."""

from __future__ import annotations

import json
from pathlib import Path

from sacglam.errors import UserInputError

# The last training record's figures a report shows (those the run logged).
TRAINING_FIGURES = [
    "train/success",
    "learner/gradient_steps",
    "alpha",
    "loss/critic",
    "buffer/transitions",
    "buffer/relabeled_fraction",
    "inference/policy_lag_max",
    "sync/bytes",
    "sync/seconds",
    "time/train_seconds",
    "time/env_steps_per_s",
    "time/updates_per_s",
]


METRICS_FILE = "metrics.jsonl"
NO_SIGNAL_SHARE = 0.1  # share of an off-policy run's budget after which "no learning signal yet" is said,
NO_SIGNAL_EPISODES = 50  # once this many episodes have ended too (a short run's 10% is a few steps)


class MetricsFileError(UserInputError, ValueError):
    """A `metrics.jsonl` with a line that is not a record (damaged, or not a run's)."""


def read_metrics(run_dir: Path) -> list[dict]:
    """The records of `<run_dir>/metrics.jsonl`, in the order they were logged (each a dict with
    `env_steps` and the metrics logged at that step; docs/reference/metrics.md defines the names).

    Every record is written whole with its newline: a last line without one that is not JSON is
    a record a crash or a full disk cut short, and is left out. Any other line that is not a
    record raises `MetricsFileError`, naming the file and the line."""
    path = Path(run_dir) / METRICS_FILE
    return metrics_records(path.read_text(errors="replace"), str(path))


def metrics_records(text: str, path: str) -> list[dict]:
    """The records of a `metrics.jsonl` whose text is `text` (`path` names it in an error), read
    as `read_metrics` reads them."""
    lines = text.splitlines()
    records = []
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
        except ValueError:
            if number == len(lines) and not text.endswith("\n"):
                break  # the torn last record
            record = None
        if not isinstance(record, dict) or not isinstance(record.get("env_steps"), int):
            raise MetricsFileError(
                f"{path} line {number} is not a metrics record ({line[:60]!r}): the file is damaged or not a "
                "sacglam run's; remove that line (or the file) and try again"
            )
        records.append(record)
    return records


def evaluations(records: list[dict]) -> list[dict]:
    return [r for r in records if any(k.startswith("eval/") for k in r)]


def overall_keys(evals: list[dict]) -> list[str]:
    """`eval/<goal set>/<mode>/all` of the last evaluation, sorted."""
    return sorted(k for k in evals[-1] if k.startswith("eval/") and k.endswith("/all")) if evals else []


def last_training_record(records: list[dict]) -> dict:
    trains = [r for r in records if "train/success" in r]
    return trains[-1] if trains else {}


def run_config(run_dir: Path) -> dict:
    """The run's config.json as a dict ({} when there is none)."""
    return json.loads((run_dir / "config.json").read_text()) if (run_dir / "config.json").exists() else {}


def run_title(run_dir: Path) -> str:
    config = run_config(run_dir)
    if not config:
        return str(run_dir)
    return (
        f"{config.get('algo')} on {config['agent']['model']}, {config.get('total_env_steps')} env steps, "
        f"runner {config.get('runner', 'local')}"
    )


def before_and_after(run_dir: str | Path) -> str:
    """What a finished run prints: success before -> after training on each goal set and mode (the
    first and last evaluations; with one evaluation, its figures alone; without evaluations, the
    last training record's headline figures)."""
    run_dir = Path(run_dir)
    records = read_metrics(run_dir)
    evals = evaluations(records)
    if not evals:
        last = last_training_record(records)
        figures = ", ".join(f"{k} {last[k]:.4g}" for k in TRAINING_FIGURES if isinstance(last.get(k), (int, float)))
        return f"{run_title(run_dir)}: no evaluation (eval_episodes 0); last training record: {figures}"
    if len(evals) == 1:  # evaluated once (`eval_at_start: false`): nothing to compare it with
        lines = [f"{run_title(run_dir)}: success at env step {evals[0]['env_steps']} (one evaluation)"]
        lines += [f"  {k.removeprefix('eval/'):<36} {evals[0][k]:.3f}" for k in overall_keys(evals)]
        return "\n".join(lines)
    config = run_config(run_dir)
    episodes = config.get("eval_episodes")
    per = (
        f"; {episodes} episodes per goal set and mode, a standard error up to {0.5 / episodes**0.5:.2f}"
        if episodes
        else ""
    )
    lines = [
        f"{run_title(run_dir)}: success before -> after training "
        f"(env steps {evals[0]['env_steps']} -> {evals[-1]['env_steps']}{per})"
    ]
    lines += [f"  {k.removeprefix('eval/'):<36} {evals[0][k]:.3f} -> {evals[-1][k]:.3f}" for k in overall_keys(evals)]
    lines += [f"  {flat}" for flat in _no_rise_lines(config, evals)]
    return "\n".join(lines)


NOISE_STANDARD_ERRORS = 2.0  # a rise within this many standard errors of the difference is not called learning


def _noise(p: float, episodes: int) -> float:
    """`NOISE_STANDARD_ERRORS` standard errors of the difference of two success rates near `p`,
    each over `episodes` episodes (binomial, pooled: sqrt(2 p (1 - p) / episodes))."""
    return NOISE_STANDARD_ERRORS * (2 * p * (1 - p) / episodes) ** 0.5


def _rise(evals: list[dict], goal_set: str, episodes: int) -> tuple[bool, list[str]] | None:
    """Whether any mode's success on `goal_set` rose, at any evaluation, above the first
    (untrained) one by more than evaluation noise: `NOISE_STANDARD_ERRORS` standard errors of the
    difference (`_noise` at the mean of the two), after the continuity correction of 1 / episodes
    (without it, 0 -> 4 successes in 64 would count as a rise, which Fisher's exact test puts at
    p = 0.12); with, per mode, its best rise and the noise it was held against, correction
    included ("greedy +0.062 at best (noise 0.110)": a rise above the figure shown is one). None when it cannot be said: the goal set is not in the first
    evaluation, a mode has no later one, or the first was already within noise of success 1
    (nothing left to learn). `evals` start with the evaluation before training (`eval_at_start`)."""
    first = evals[0]
    keys = sorted(k for k in first if k.startswith(f"eval/{goal_set}/") and k.endswith("/all"))
    if not keys or any(first[k] + _noise(first[k], episodes) >= 1 for k in keys):
        return None
    rose, rises = False, []
    for key in keys:
        best = max((e for e in evals[1:] if key in e), key=lambda e: e[key], default=None)
        if best is None:
            return None
        # the figure a rise must pass, as it is shown: the noise with its continuity correction
        noise = _noise((first[key] + best[key]) / 2, episodes) + 1 / episodes
        rose = rose or best[key] - first[key] > noise
        rises.append(f"{key.split('/')[2]} {best[key] - first[key]:+.3f} at best (noise {noise:.3f})")
    return rose, rises


def no_rise_line(train: tuple[bool, list[str]] | None, episodes: int, goal_set: str) -> str | None:
    """A line when no mode's success on the train goals rose beyond evaluation noise (`train`:
    `_rise` of the goals the run trains on, `goal_set`); None when one did, or when it cannot be said."""
    if train is None or train[0]:
        return None
    goals = "the train goals" if "train" in goal_set else f"the goals it trains on ({goal_set})"
    return (
        f"no success on {goals} rose beyond evaluation noise ({', '.join(train[1])}; "
        f"{NOISE_STANDARD_ERRORS:g} standard errors plus 1/{episodes} at {episodes} episodes): the agent has not measurably learned; "
        "docs/guides/own-environment.md#what-the-first-run-tells-you says what to try"
    )


def held_out_no_rise_line(
    evals: list[dict], goal_set: str, train: tuple[bool, list[str]] | None, episodes: int
) -> str | None:
    """A line when success on the train goals (`goal_set`, `train` its `_rise`) rose beyond
    evaluation noise but, on a goal set the run evaluated besides (its held-out goals), no mode's
    did: the agent learned the goals it trained on and not the task. None otherwise, or when it
    cannot be said."""
    if train is None or not train[0]:
        return None
    others = sorted({k.split("/")[1] for k in evals[0] if k.startswith("eval/") and k.endswith("/all")} - {goal_set})
    flat = {name: measured for name in others if (measured := _rise(evals, name, episodes)) and not measured[0]}
    if not flat:
        return None
    held = "; ".join(f"{name}: {', '.join(measured[1])}" for name, measured in flat.items())
    return (
        f"success on the train goals rose, but none on the held-out goals rose beyond evaluation noise ({held}; "
        f"{NOISE_STANDARD_ERRORS:g} standard errors plus 1/{episodes} at {episodes} episodes): the agent learned its training goals, "
        "not the task; docs/guides/own-environment.md#what-the-first-run-tells-you says what to try"
    )


def _no_rise_lines(config: dict, evals: list[dict]) -> list[str]:
    """`no_rise_line` and `held_out_no_rise_line` for a run's evaluations (those that apply), when
    its config (`run_config`) says how many episodes each had and that the first came before
    training."""
    episodes, goals = config.get("eval_episodes"), (config.get("env") or {}).get("goals")
    if not episodes or not goals or not config.get("eval_at_start", True) or len(evals) < 2:
        return []
    train = _rise(evals, goals, episodes)
    lines = (no_rise_line(train, episodes, goals), held_out_no_rise_line(evals, goals, train, episodes))
    return [line for line in lines if line is not None]


def exploration_lines(records: list[dict]) -> list[str]:
    """What the run measured of its exploration: the warm start's end point, a run that went 10%
    of its budget without a learning signal or a report to relabel with, and a held-out goal
    reported in training (docs/reference/metrics.md)."""
    lines = []
    warm = next((r for r in records if "warm_start/kl_to_uniform" in r), None)
    if warm is not None:
        lines.append(
            f"Warm start: {int(warm['warm_start/steps'])} steps; the untrained policy's mean KL(uniform || pi) on "
            f"random play's states {warm['warm_start/kl_to_uniform']:.3g} nats, largest probability "
            f"{warm['warm_start/largest_probability']:.2f} on average (uniform: {warm['warm_start/uniform_largest_probability']:.2f})."
        )
    silent = next((r for r in records if "explore/no_signal_env_steps" in r), None)
    if silent is not None:
        lines.append(
            f"**No learning signal by env step {int(silent['explore/no_signal_env_steps'])}** (at least {NO_SIGNAL_SHARE:.0%} of "
            f"the budget and {NO_SIGNAL_EPISODES} episodes): no rewarded step, and no goal reported for relabeling, had "
            "been collected."
        )
    unreported = next((r for r in records if "explore/no_report_env_steps" in r), None)
    if unreported is not None:
        lines.append(
            f"**No goal reported for relabeling by env step {int(unreported['explore/no_report_env_steps'])}**: the "
            "environment's `info['achieved_goals']` stayed empty, so hindsight relabeling relabeled nothing."
        )
    leaked = next((r for r in records if "explore/held_out_reported_env_steps" in r), None)
    if leaked is not None:
        lines.append(
            f"**A held-out goal was reported in training by env step {int(leaked['explore/held_out_reported_env_steps'])}**: "
            "the environment's `info['achieved_goals']` named a goal of its held-out goal set, so relabeling could "
            "train on it and held-out success does not measure goals never trained on."
        )
    return [*lines, ""] if lines else []


def report_lines(run_dir: Path, image: str = "curves.png") -> list[str]:
    """The body of a run's report (Markdown); `image` is the curves' path relative to the report."""
    records = read_metrics(run_dir)
    evals, last = evaluations(records), last_training_record(records)
    lines = [run_title(run_dir), "", *exploration_lines(records)]
    if len(evals) == 1:
        lines += [f"| success (all goal types) | env step {evals[0]['env_steps']} |", "| --- | --- |"]
        lines += [f"| {k.removeprefix('eval/')} | {evals[0][k]:.3f} |" for k in overall_keys(evals)]
        lines += ["", "One evaluation (`eval_at_start: false`): no success before training to compare with.", ""]
    elif evals:
        lines += ["| success (all goal types) | before | after |", "| --- | --- | --- |"]
        lines += [
            f"| {k.removeprefix('eval/')} | {evals[0][k]:.3f} | {evals[-1][k]:.3f} |" for k in overall_keys(evals)
        ]
        lines += ["", f"before: env step {evals[0]['env_steps']}; after: env step {evals[-1]['env_steps']}", ""]
        for flat in _no_rise_lines(run_config(run_dir), evals):
            lines += [f"**{flat[0].upper()}{flat[1:]}.**", ""]
        keys = overall_keys(evals)
        lines += [
            "Learning curve (success, all goal types):",
            "",
            "| env steps | " + " | ".join(k.removeprefix("eval/").removesuffix("/all") for k in keys) + " |",
            "| --- |" + " --- |" * len(keys),
        ]
        lines += [f"| {r['env_steps']} | " + " | ".join(f"{r[k]:.3f}" for k in keys) + " |" for r in evals]
        lines += [""]
    else:
        lines += ["No evaluation in this run (eval_episodes 0).", ""]
    if last:
        lines += ["| last training record | value |", "| --- | --- |"]
        lines += [f"| {k} | {last[k]:.4g} |" for k in TRAINING_FIGURES if isinstance(last.get(k), (int, float))]
    lines += ["", *health_lines(records), f"![curves]({image})", ""]
    return lines


def _by_type(record: dict, prefix: str) -> dict[str, float]:
    """`{goal type: value}` of the record's `prefix/<goal type>` figures."""
    return {
        k.removeprefix(prefix + "/"): v
        for k, v in record.items()
        if k.startswith(prefix + "/") and k.count("/") == prefix.count("/") + 1
    }


def health_lines(records: list[dict]) -> list[str]:
    """What tells a run that learns its train goals but not held-out ones why (docs/reference/metrics.md,
    "Learner diagnostics"): the policy's entropy and the relabeled goal-type mix per goal type, the
    probability the policy gives its critic's argmax, and which loss moves the shared weights."""
    lines: list[str] = []
    entropy_record = next((r for r in reversed(records) if any(k.startswith("entropy/") for k in r)), None)
    if entropy_record is not None:
        entropy = _by_type(entropy_record, "entropy")
        batch = _by_type(entropy_record, "batch/relabeled_share")
        buffer = _by_type(entropy_record, "buffer/relabeled_share")
        lines += [
            f"Policy and relabels by goal type (training record at env step {entropy_record['env_steps']}):",
            "",
            "| goal type | policy entropy (nats) | share of the batch's relabeled rows | of the buffer's relabels |",
            "| --- | --- | --- | --- |",
        ]
        for name in dict.fromkeys([*entropy, *batch, *buffer]):
            cells = [f"{table[name]:.3f}" if name in table else "-" for table in (entropy, batch, buffer)]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    measured = next((r for r in reversed(records) if any(k.startswith("eval_pi_q_argmax/") for k in r)), None)
    if measured is not None:
        rows = sorted(
            {
                k.rsplit("/", 1)[0].removeprefix("eval_pi_q_argmax/")
                for k in measured
                if k.startswith("eval_pi_q_argmax/")
            }
        )
        types = list(dict.fromkeys(k.rsplit("/", 1)[1] for k in measured if k.startswith("eval_pi_q_argmax/")))
        lines += [
            f"Does the policy follow its critic? The probability pi gives the critic's argmax, mean over the "
            f"evaluation's steps (env step {measured['env_steps']}; near 0 on a goal type: the policy has dropped "
            "what its critic ranks first):",
            "",
            "| goal set / policy | " + " | ".join(types) + " |",
            "| --- |" + " --- |" * len(types),
        ]
        for row in rows:
            values = [measured.get(f"eval_pi_q_argmax/{row}/{t}") for t in types]
            lines.append(f"| {row} | " + " | ".join("-" if v is None else f"{v:.3f}" for v in values) + " |")
        lines.append("")
    gradients = next((r for r in reversed(records) if "grad_norm/critic_shared" in r), None)
    if gradients is not None and "grad_norm/policy_shared" in gradients:
        lines += [
            "Which loss moves the weights the actor and critic share (before clipping; env step "
            f"{gradients['env_steps']}): critic {gradients['grad_norm/critic_shared']:.3g}, policy "
            f"{gradients['grad_norm/policy_shared']:.3g}, cosine {gradients['grad_cosine/shared']:.2f}.",
            "",
        ]
    return lines


def plot_curves(run_dir: Path) -> Path:
    """`curves.png`: evaluation success (overall, per goal set and mode) and training-episode
    success against env steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_metrics(run_dir)
    evals = evaluations(records)
    trains = [r for r in records if "train/success" in r]
    entropies = [r for r in records if any(k.startswith("entropy/") for k in r)]
    fig, axes = plt.subplots(1, 3 if entropies else 2, figsize=(16.5 if entropies else 11, 4))
    for key in overall_keys(evals):
        axes[0].plot(
            [r["env_steps"] for r in evals], [r[key] for r in evals], marker="o", label=key.removeprefix("eval/")
        )
    axes[0].set(xlabel="env steps", ylabel="success rate", title="evaluation", ylim=(0, 1))
    if evals:
        axes[0].legend(fontsize=7)
    axes[1].plot([r["env_steps"] for r in trains], [r["train/success"] for r in trains])
    axes[1].set(xlabel="env steps", ylabel="success rate", title="training episodes (recent ~200)", ylim=(0, 1))
    if entropies:
        for name in dict.fromkeys(t for r in entropies for t in _by_type(r, "entropy")):
            points = [(r["env_steps"], r[f"entropy/{name}"]) for r in entropies if f"entropy/{name}" in r]
            axes[2].plot(*zip(*points), label=name)
        axes[2].set(xlabel="env steps", ylabel="nats", title="policy entropy by goal type (batches)")
        axes[2].legend(fontsize=7)
    fig.tight_layout()
    path = run_dir / "curves.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_report(run_dir: str | Path) -> Path:
    run_dir = Path(run_dir)
    plot_curves(run_dir)
    report = run_dir / "report.md"
    report.write_text("\n".join([f"# Run report: {run_dir}", "", *report_lines(run_dir)]))
    return report
