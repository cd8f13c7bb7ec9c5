"""docs/reference/config.md is generated from sacglam/config.py's dataclasses: it lists every key of
a run config and of `sacglam evaluate` with its type, default and docstring, and the committed page
is what the generator writes today."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from sacglam import config
from sacglam.config_reference import PAGE, field_docs, render

ROOT = Path(__file__).resolve().parents[1]


def test_the_committed_config_reference_is_current():
    committed = (ROOT / PAGE).read_text()
    assert committed == render(), f"{PAGE} is stale: run `.venv/bin/python -m sacglam.config_reference`"


def test_every_field_of_every_config_block_is_on_the_page():
    page = render()
    blocks = {
        "": config.TrainConfig,
        "env.": config.EnvConfig,
        "agent.": config.AgentConfig,
        "sac.": config.SACConfig,
        "ppo.": config.PPOConfig,
        "pipeline.": config.PipelineConfig,
        "pipeline.resources.": config.ResourcesConfig,
        "goal_sampler.": config.GoalSamplerConfig,
    }
    missing = [
        prefix + f.name
        for prefix, cls in blocks.items()
        for f in dataclasses.fields(cls)
        if f"| `{prefix}{f.name}` |" not in page
    ]
    assert not missing, missing


def test_every_config_field_has_a_docstring():
    """The reference and `--help` say what each key does: a field without a docstring fails here."""
    bare = [
        f"{cls.__name__}.{name}"
        for cls in (
            config.TrainConfig,
            config.EnvConfig,
            config.AgentConfig,
            config.SACConfig,
            config.PPOConfig,
            config.PipelineConfig,
            config.ResourcesConfig,
            config.GoalSamplerConfig,
            config.EvalConfig,
        )
        for name, (doc, _) in field_docs(cls).items()
        if not doc
    ]
    assert not bare, bare
