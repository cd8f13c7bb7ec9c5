"""A run's report and the lines a finished run prints, from hand-written metrics files."""

from __future__ import annotations

import json
from pathlib import Path

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
