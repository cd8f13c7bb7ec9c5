"""docs/reference/metrics.md is the registry of every logged metric: a name the code logs that the registry
lacks fails here, and so does a registry name nothing logs any more.

Names come from two sources, so neither a short run nor a text scan can miss one alone:
- dynamic: the keys of every `metrics.jsonl` record of four short local runs (SAC-GLAM+HER,
  SAC-GLAM, PPO-GLAM with HER, SAC-GLAM+HER choosing its own goals), evaluations included;
- static: every string literal of the form `"part/part"` used as a dict key in the package (what
  only a Ray actor or a long run would log), and the dashboard's own counters.
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from pathlib import Path

import pytest

from sacglam.config import AgentConfig, GoalSamplerConfig, PipelineConfig, PPOConfig, SACConfig, TrainConfig
from sacglam.envs.goals import GOAL_SETS, GOAL_TYPES
from sacglam.pipeline.run import run_pipeline
from sacglam.report import read_metrics

ROOT = Path(__file__).resolve().parents[1]
REGISTRY = ROOT / "docs" / "reference" / "metrics.md"
_NAME_CELL = re.compile(r"^\| (`[^|]+`(?:, `[^|]+`)*) \|", re.M)
_PLACEHOLDER_VALUES = {
    "goal set": sorted(GOAL_SETS),
    "policy": ["sampled", "greedy"],
    "goal type": list(GOAL_TYPES),
}
# Logged only in a Ray process, which the short local runs below do not start.
RAY_ONLY = {"inference/batches", "sacglam_env_steps", "sacglam_episodes"}
# Logged only by a run that collects no learning signal, or whose environment reports a held-out
# goal (tests/test_exploration.py logs them).
ONLY_WITHOUT_SIGNAL = {
    "explore/no_signal_env_steps",
    "explore/no_report_env_steps",
    "explore/held_out_reported_env_steps",  # an environment that breaks the held-out split
}
# Logged only by a run that `stop_when` ended early (tests/test_pipeline.py logs it).
ONLY_STOPPED_EARLY = {"run/stopped_early_at", "run/time_limit_at"}  # runs that end before their budget


def registry_patterns() -> dict[str, re.Pattern]:
    """Registry name (as written) -> the regex its logged names match."""
    patterns = {}
    for cell in _NAME_CELL.findall(REGISTRY.read_text()):
        for name in re.findall(r"`([^`]+)`", cell):
            regex = re.escape(name)
            for placeholder, values in _PLACEHOLDER_VALUES.items():
                regex = regex.replace(re.escape(f"<{placeholder}>"), "(?:" + "|".join(map(re.escape, values)) + ")")
            assert "<" not in regex, f"docs/reference/metrics.md: unknown placeholder in {name!r}"
            patterns[name] = re.compile(regex + r"\Z")
    return patterns


def static_names() -> set[str]:
    """String literals `"a/b"` used as dict keys anywhere in the package, and the dashboard counters."""
    names = set()
    for path in (ROOT / "sacglam").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Dict):
                keys = [k for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
                names |= {k.value for k in keys if re.fullmatch(r"[a-z_]+/[a-z_/]+", k.value)}
    dashboard = (ROOT / "sacglam" / "pipeline" / "dashboard.py").read_text()
    names |= set(re.findall(r'Counter\("(sacglam_[a-z_]+)"', dashboard))
    return names


@pytest.fixture(scope="module")
def logged_names(tmp_path_factory) -> set[str]:
    tmp = tmp_path_factory.mktemp("metrics")
    tiny = AgentConfig(model="tiny-causal", lora_r=0, critic_width=32)
    sac_her = TrainConfig(
        algo="sac-her",
        agent=tiny,
        sac=SACConfig.with_her(batch_size=16, random_steps=64, critic_warmup_updates=2, grad_diagnostics_every=1),
        num_envs=8,
        total_env_steps=256,
        eval_every=128,
        eval_episodes=4,
        log_every=64,
        warm_start_steps=2,
        output_dir=tmp / "sac-her",
        progress=False,
        pipeline=PipelineConfig(rollout_workers=2, checkpoint_every=256),
    )
    runs = [
        sac_her,
        replace(  # with the per-state entropy target on a schedule (its metric: target_entropy_ratio)
            sac_her,
            algo="sac",
            sac=SACConfig(
                batch_size=16,
                random_steps=64,
                target_entropy_ratio=0.5,
                target_entropy_ratio_final=0.3,
                target_entropy_anneal_updates=4,
            ),
            output_dir=tmp / "sac",
        ),
        replace(
            sac_her,
            algo="ppo",
            agent=replace(tiny, critic="value"),
            ppo=PPOConfig(rollout_steps=64, epochs=1, minibatch_size=32, her=True),
            output_dir=tmp / "ppo",
        ),
        replace(sac_her, goal_sampler=GoalSamplerConfig(mode="generalising"), output_dir=tmp / "autotelic"),
    ]
    names: set[str] = set()
    for cfg in runs:
        run_pipeline(cfg, announce=lambda _: None)
        names |= {key for record in read_metrics(cfg.output_dir) for key in record if key != "env_steps"}
    return names


def _unregistered(names: set[str], patterns: dict[str, re.Pattern]) -> list[str]:
    return sorted(n for n in names if not any(p.match(n) for p in patterns.values()))


def test_every_metric_the_code_logs_is_in_the_registry(logged_names):
    missing = _unregistered(logged_names | static_names(), registry_patterns())
    assert not missing, f"logged but not defined in docs/reference/metrics.md (add a row for each): {missing}"


def test_every_registry_name_is_logged(logged_names):
    patterns = registry_patterns()
    dead = sorted(
        name
        for name, pattern in patterns.items()
        if name not in RAY_ONLY | ONLY_WITHOUT_SIGNAL | ONLY_STOPPED_EARLY
        and not any(pattern.match(n) for n in logged_names)
    )
    assert not dead, f"docs/reference/metrics.md defines names no run logs (remove or fix them): {dead}"
    assert RAY_ONLY <= set(patterns) and RAY_ONLY <= static_names()


def test_the_registry_check_can_fail(logged_names):
    """A name the registry lacks is caught, and so is one the pattern expansion must not accept."""
    patterns = registry_patterns()
    assert _unregistered({"loss/made_up", "eval/train/sampled/jump"}, patterns) == [
        "eval/train/sampled/jump",
        "loss/made_up",
    ]
    assert not _unregistered({"eval/simple-test/greedy/grow then grasp"}, patterns)


def _dashboard_series() -> tuple[set[str], set[str]]:
    """(the series names, the name regexes) the shipped Grafana dashboard's queries use."""
    import json

    dashboard = json.loads((ROOT / "deploy" / "grafana" / "sacglam-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    regexes = {m for e in exprs for m in re.findall(r'__name__=~"([^"]+)"', e)}
    names = {m for e in exprs for m in re.findall(r"\bray_sacglam_[a-z0-9_]+\b", re.sub(r'"[^"]*"', "", e))}
    return names, regexes


def test_every_series_the_grafana_dashboard_graphs_is_one_a_run_exports(logged_names):
    """Ray exports each gauge `sacglam_<name>` to Prometheus as `ray_sacglam_<name>`
    (benchmarks/suite/live_curves.py reads them from a real Prometheus): a panel whose series no run
    exports would stay empty."""
    from sacglam.pipeline.dashboard import metric_name

    exported = {"ray_" + metric_name(n) for n in logged_names | static_names()} | {
        f"ray_{n}" for n in RAY_ONLY if n.startswith("sacglam_")
    }
    names, regexes = _dashboard_series()
    assert names and not names - exported, sorted(names - exported)
    assert all(any(re.fullmatch(r, n) for n in exported) for r in regexes), regexes
