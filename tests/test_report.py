"""A run's report and the lines a finished run prints, from hand-written metrics files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sacglam.report import before_and_after, report_lines

CONFIG = {"algo": "ppo", "agent": {"model": "tiny-causal"}, "total_env_steps": 64, "runner": "local"}


def write_run(directory: Path, records: list[dict]) -> Path:
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(CONFIG))
    (directory / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in records))
    return directory


def evaluation(step: int, train: float, test: float) -> dict:
    return {"env_steps": step, "eval/simple-train/greedy/all": train, "eval/simple-test/greedy/all": test}


TRAINING = {"env_steps": 32, "train/success": 0.25, "learner/gradient_steps": 4}


def test_before_and_after_compare_the_first_and_last_evaluations(tmp_path):
    run = write_run(tmp_path / "run", [evaluation(0, 0.1, 0.0), TRAINING, evaluation(64, 0.75, 0.5)])
    printed = before_and_after(run)
    assert "(env steps 0 -> 64)" in printed
    assert "simple-train/greedy/all" in printed and "0.100 -> 0.750" in printed
    assert "0.000 -> 0.500" in printed
    body = "\n".join(report_lines(run))
    assert "| simple-train/greedy/all | 0.100 | 0.750 |" in body


def test_one_evaluation_is_not_shown_as_before_and_after(tmp_path):
    """A run with `eval_at_start: false` and one evaluation at its end has no "before": printing
    its only evaluation as both before and after would claim that training changed nothing."""
    run = write_run(tmp_path / "run", [TRAINING, evaluation(64, 0.75, 0.5)])
    printed = before_and_after(run)
    assert "before" not in printed and "->" not in printed
    assert "success at env step 64" in printed and "0.750" in printed and "0.500" in printed
    body = "\n".join(report_lines(run))
    assert "| before | after |" not in body
    assert "| simple-train/greedy/all | 0.750 |" in body


def test_a_run_without_evaluations_prints_its_last_training_record(tmp_path):
    run = write_run(tmp_path / "run", [TRAINING])
    printed = before_and_after(run)
    assert "no evaluation" in printed and "train/success 0.25" in printed
    assert "No evaluation in this run" in "\n".join(report_lines(run))


def _run_with_episodes(
    directory: Path, *evals: dict, episodes: int = 64, at_start: bool = True, goals: str = "train"
) -> Path:
    directory.mkdir()
    env = {"name": "my_env:MyEnv", "goals": goals}
    config = CONFIG | {"eval_episodes": episodes, "eval_at_start": at_start, "env": env}
    (directory / "config.json").write_text(json.dumps(config))
    records = [{"env_steps": 64 * i, **e} for i, e in enumerate(evals)]
    records.insert(1, TRAINING)
    (directory / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in records))
    return directory


def _success(sampled: float, greedy: float, held_out: float = 0.0) -> dict:
    return {
        "eval/train/sampled/all": sampled,
        "eval/train/greedy/all": greedy,
        "eval/test/sampled/all": held_out,
    }


def test_a_run_whose_train_success_rose_within_noise_says_it_has_not_measurably_learned(tmp_path):
    """Two evaluations of 64 episodes at a success near 0.2 differ by up to about 0.14 by chance
    (2 standard errors of the difference), and 0 -> 4 successes is no rise either (Fisher's exact
    test: p = 0.12); a held-out rise does not count: the line is about the goals the agent trains
    on."""
    flat = _run_with_episodes(tmp_path / "flat", _success(0.203, 0.0), _success(0.188, 0.062, held_out=0.9))
    printed = before_and_after(flat)
    assert "64 episodes per goal set and mode, a standard error up to 0.06" in printed
    line = next(x for x in printed.splitlines() if "no success on the train goals rose" in x)
    mean = (0.203 + 0.188) / 2
    assert f"sampled -0.015 at best (noise {2 * (2 * mean * (1 - mean) / 64) ** 0.5 + 1 / 64:.3f})" in line
    assert "greedy +0.062 at best" in line and "what-the-first-run-tells-you" in line
    assert "not measurably learned" in "\n".join(report_lines(flat))


def test_a_run_that_trains_on_its_held_out_set_names_that_set_in_the_line(tmp_path):
    """`env.goals: test` trains (and evaluates) on the held-out goals: the line must not call them
    the train goals."""
    first, last = ({"eval/test/sampled/all": sampled, "eval/test/greedy/all": 0.0} for sampled in (0.2, 0.19))
    flat = _run_with_episodes(tmp_path / "on_test", first, last, goals="test")
    printed = before_and_after(flat)
    assert "no success on the goals it trains on (test) rose beyond evaluation noise" in printed, printed
    assert "train goals" not in printed


def test_a_rise_beyond_noise_at_any_evaluation_in_either_mode_gets_no_such_line(tmp_path):
    # greedy 0.2 -> 0.42: mean 0.31, noise 2 * sqrt(2 * 0.31 * 0.69 / 64) = 0.163 < 0.22 - 1/64
    risen = _run_with_episodes(tmp_path / "risen", _success(0.2, 0.2), _success(0.19, 0.42))
    assert "not measurably learned" not in before_and_after(risen)
    # the same rise on 16 episodes is noise (0.327 > 0.22 - 1/16)
    few = _run_with_episodes(tmp_path / "few", _success(0.2, 0.2), _success(0.19, 0.42), episodes=16)
    assert "not measurably learned" in before_and_after(few)
    # a run that learned and fell back learned: its last figures say the rest
    fell = _run_with_episodes(tmp_path / "fell", _success(0.2, 0.2), _success(0.2, 0.5), _success(0.2, 0.2))
    assert "not measurably learned" not in before_and_after(fell)


def test_no_such_line_where_nothing_was_left_to_learn_or_the_first_evaluation_came_after_training(tmp_path):
    solved = _run_with_episodes(tmp_path / "solved", _success(1.0, 0.97), _success(1.0, 1.0))
    assert "evaluation noise" not in before_and_after(solved)
    late = _run_with_episodes(tmp_path / "late", _success(0.2, 0.2), _success(0.2, 0.2), at_start=False)
    assert "evaluation noise" not in before_and_after(late)


def _with_held_out(sampled: float, greedy: float, held_sampled: float, held_greedy: float) -> dict:
    return _success(sampled, greedy, held_sampled) | {"eval/test/greedy/all": held_greedy}


def test_a_run_that_learned_its_train_goals_but_not_the_held_out_ones_says_so(tmp_path):
    """Train goals 0.199 -> 0.562 sampled and 0 -> 0.363 greedy (an outside environment's first
    run, 2026-11-29), held-out goals at about random play's 0.13 sampled and 0 greedy at every
    evaluation: learned, but not beyond its training goals."""
    memorised = _run_with_episodes(
        tmp_path / "memorised",
        _with_held_out(0.199, 0.0, 0.13, 0.0),
        _with_held_out(0.4, 0.2, 0.15, 0.0),
        _with_held_out(0.562, 0.363, 0.12, 0.0),
        episodes=256,
    )
    printed = before_and_after(memorised)
    assert "rose beyond evaluation noise" in printed and "not measurably learned" not in printed
    line = next(x for x in printed.splitlines() if "none on the held-out goals rose" in x)
    noise = 2 * (2 * 0.14 * 0.86 / 256) ** 0.5 + 1 / 256  # sampled: 0.13 first, 0.15 at best; + the correction
    assert f"test: greedy +0.000 at best (noise 0.004), sampled +0.020 at best (noise {noise:.3f})" in line
    assert "learned its training goals, not the task" in line
    assert "**Success on the train goals rose, but none on the held-out goals" in "\n".join(report_lines(memorised))


def test_no_held_out_line_when_held_out_success_rose_or_the_train_goals_did_not(tmp_path):
    general = _run_with_episodes(
        tmp_path / "general", _with_held_out(0.2, 0.0, 0.13, 0.0), _with_held_out(0.56, 0.36, 0.13, 0.2), episodes=256
    )
    assert "held-out goals rose" not in before_and_after(general)
    # neither rose: one line, about the train goals (the held-out line would add nothing)
    flat = _run_with_episodes(
        tmp_path / "flat", _with_held_out(0.2, 0.0, 0.13, 0.0), _with_held_out(0.21, 0.0, 0.13, 0.0), episodes=256
    )
    printed = before_and_after(flat)
    assert "not measurably learned" in printed and "held-out goals rose" not in printed
    # held-out goals already solved before training: nothing to say about them
    solved = _run_with_episodes(
        tmp_path / "solved", _with_held_out(0.2, 0.0, 1.0, 1.0), _with_held_out(0.56, 0.36, 1.0, 1.0), episodes=256
    )
    assert "held-out goals rose" not in before_and_after(solved)


def test_metrics_records_drop_a_torn_last_record_only():
    from sacglam.report import MetricsFileError, metrics_records

    whole = '{"env_steps": 0, "a": 1}\n{"env_steps": 64, "a": NaN}\n'
    assert [r["env_steps"] for r in metrics_records(whole + '{"env_steps": 128, "a', "m")] == [0, 64]
    assert [r["env_steps"] for r in metrics_records(whole + '{"env_steps": 128}', "m")] == [0, 64, 128]  # whole
    with pytest.raises(MetricsFileError, match="m line 2 is not a metrics record"):
        metrics_records('{"env_steps": 0}\n{"env_steps": 64, "a\n{"env_steps": 128}\n', "m")  # torn, then more
    with pytest.raises(MetricsFileError, match="m line 1 is not a metrics record"):
        metrics_records('{"steps": 0}\n', "m")  # not a run's


def test_the_report_shows_entropy_relabels_and_critic_agreement_per_goal_type(tmp_path):
    health = {
        "env_steps": 64,
        "train/success": 0.5,
        "entropy/grasp": 0.91,
        "entropy/grow": 0.12,
        "batch/relabeled_share/grasp": 0.93,
        "batch/relabeled_share/grow": 0.07,
        "buffer/relabeled_share/grasp": 0.95,
        "buffer/relabeled_share/grow": 0.05,
        "grad_norm/critic_shared": 0.4,
        "grad_norm/policy_shared": 2.5,
        "grad_cosine/shared": -0.25,
    }
    measured = evaluation(64, 0.75, 0.5) | {
        "eval_pi_q_argmax/simple-test/greedy/grow": 0.031,
        "eval_pi_q_argmax/simple-test/greedy/grasp": 0.8,
        "eval_pi_q_argmax/simple-test/greedy/all": 0.2,
    }
    run = write_run(tmp_path / "run", [evaluation(0, 0.1, 0.0), health, measured])
    body = "\n".join(report_lines(run))
    assert "| grow | 0.120 | 0.070 | 0.050 |" in body
    assert "| grasp | 0.910 | 0.930 | 0.950 |" in body
    assert "| simple-test/greedy | 0.031 | 0.800 | 0.200 |" in body
    assert "critic 0.4, policy 2.5, cosine -0.25" in body
    assert "Policy and relabels by goal type" not in "\n".join(report_lines(write_run(tmp_path / "ppo", [TRAINING])))
