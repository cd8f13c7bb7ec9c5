"""YAML configs: every file in tune_configs/runs/ loads, and bad files fail with a message that says
what is wrong and where."""

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from sacglam.cli import parse
from sacglam.config import EnvConfig, TrainConfig
from sacglam.config_io import ConfigError, from_dict, load_yaml_config

# Run configs; the experiment grids of tune_configs/experiments/ are tested in test_tune.py.
TUNE_CONFIGS = sorted((Path(__file__).resolve().parents[1] / "tune_configs" / "runs").glob("*.yaml"))


@pytest.mark.parametrize("path", TUNE_CONFIGS, ids=lambda p: p.name)
def test_every_tune_config_loads_into_a_valid_train_config(path):
    """Every key is read and checked as the file has it, but a TextWorld config builds one game per
    level instead of its 10 (building games, and collecting the tiny model's words from them, is
    what a run pays, not a config check: 60 games took about 4 minutes on an empty cache)."""
    mapping = yaml.safe_load(path.read_text())  # what `load_yaml_config` reads, before `from_dict`
    if mapping.get("env", {}).get("name") == "textworld":
        assert mapping["env"].get("tw_games", 1) >= 1
        mapping["env"]["tw_games"] = 1
    cfg = from_dict(TrainConfig, mapping, where=str(path))
    assert isinstance(cfg, TrainConfig) and cfg.total_env_steps > 0


def test_yaml_values_land_in_nested_dataclasses_with_their_types(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "algo: sac\nsac: {her: false, gamma: 1, batch_size: 64}\nagent: {model: tiny-seq2seq}\noutput_dir: out\n"
    )
    cfg = load_yaml_config(TrainConfig, path)
    assert cfg.sac.gamma == 1.0 and isinstance(cfg.sac.gamma, float) and cfg.sac.batch_size == 64
    assert cfg.agent.model == "tiny-seq2seq" and cfg.output_dir == "out"


def test_a_number_in_exponent_form_fills_a_numeric_setting(tmp_path):
    """PyYAML (YAML 1.1) reads `5e-4` and `1e4` as strings; a numeric setting reads them as the
    flags `--sac.actor-lr 5e-4` and `--total-env-steps 10000` do. Untyped values (an environment's
    `kwargs`) keep what YAML read, and a fraction is no step count."""
    path = tmp_path / "c.yaml"
    path.write_text(
        "sac: {actor_lr: 5e-4, critic_lr: 1E-3, alpha_lr: 2.5e-4}\ntotal_env_steps: 1e4\neval_every: 2.0e3\n"
        "env: {name: 'tests.broken_envs:HeldOutDial', kwargs: {split: 1e3}}\n"
    )
    cfg = load_yaml_config(TrainConfig, path)
    assert (cfg.sac.actor_lr, cfg.sac.critic_lr, cfg.sac.alpha_lr) == (5e-4, 1e-3, 2.5e-4)
    assert (cfg.total_env_steps, cfg.eval_every) == (10_000, 2_000) and type(cfg.total_env_steps) is int
    assert cfg.env.kwargs == {"split": "1e3"}
    path.write_text("total_env_steps: 2.5e0\n")
    with pytest.raises(ConfigError, match="total_env_steps: expected int, got str '2.5e0'"):
        load_yaml_config(TrainConfig, path)
    path.write_text("sac: {tau: 1e400}\n")  # no infinity out of a typo
    with pytest.raises(ConfigError, match="tau: expected float, got str '1e400'"):
        load_yaml_config(TrainConfig, path)


def test_a_nested_block_keeps_the_run_defaults_the_help_shows_for_what_it_leaves_out(tmp_path):
    """`agent: {critic_width: 128}` changes the critic's width and nothing else: the model stays the
    run's default (the tiny model), not `AgentConfig()`'s own (SmolLM2); the same for `env` (the
    simplified task) and `sac` (SAC-GLAM+HER's settings)."""
    path = tmp_path / "c.yaml"
    path.write_text("agent: {critic_width: 128}\nenv: {max_steps: 10}\nsac: {batch_size: 64}\n")
    cfg = load_yaml_config(TrainConfig, path)
    default = TrainConfig()
    assert cfg.agent == replace(default.agent, critic_width=128)
    assert cfg.env == replace(default.env, max_steps=10)
    assert cfg.sac == replace(default.sac, batch_size=64)
    assert cfg == parse(["train", "--agent.critic-width", "128", "--env.max-steps", "10", "--sac.batch-size", "64"])


@pytest.mark.parametrize(
    "algo, flags",
    [
        ("sac", []),
        ("ppo", []),
        ("sac-her", []),
        ("sac", ["--env.name", "sacglam.envs.sanity:SayWord"]),
        ("sac-her", ["--env.name", "babyai-text"]),
    ],
)
def test_a_method_or_environment_named_in_a_file_or_by_flags_gets_the_same_defaults(tmp_path, algo, flags):
    """`algo: sac` gets the paper's SAC-GLAM settings (no relabeling) and `algo: ppo` a value head,
    whether a run config or `--algo` names the method; an environment other than Playground-Text
    gets the `train` goal set either way."""
    path = tmp_path / "c.yaml"
    env = f"env: {{name: {flags[1]}}}\n" if flags else ""
    path.write_text(f"algo: {algo}\n{env}")
    from_file = load_yaml_config(TrainConfig, path)
    from_flags = parse(["train", "--algo", algo, *flags])
    assert from_file == from_flags
    beside = tmp_path / "env_only.yaml"  # `--algo` beside a file that does not name the method
    beside.write_text(env or "num_envs: 16\n")
    from_both = parse(["train", "--config", str(beside), "--algo", algo])
    assert from_both.agent.critic == from_file.agent.critic and from_both.sac == from_file.sac
    assert from_file.sac.her == (algo == "sac-her") or algo == "ppo"
    assert from_file.agent.critic == ("value" if algo == "ppo" else "action")
    assert from_file.env.goals == ("train" if flags else "simple-train")
    if flags:  # BabyAI-Text reads these: EnvConfig's own, not the simplified Playground task's 3 and 8
        assert (from_file.env.n_objects, from_file.env.max_steps) == (EnvConfig().n_objects, EnvConfig().max_steps)


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "algo: sac-her\nsac: {batchsize: 64}\n",
            r"sac: unknown key 'batchsize' for SACConfig; did you mean 'batch_size'",
        ),
        ("algo: dqn\n", r"algo: 'dqn' is not one of 'sac', 'sac-her', 'ppo'"),
        ("sac: {gamma: high}\n", r"sac:gamma: expected float, got str 'high'"),
        ("sac: {batch_size: 12.5}\n", r"sac:batch_size: expected int"),
        ("algo: sac\nsac: {her: true}\n", r"algo='sac' but sac.her=True"),
        ("env: {n_objects: 2, goals: train}\n", r"n_objects=2 is too small"),
        ("- a list\n", r"expected a mapping of TrainConfig fields"),
    ],
)
def test_bad_config_files_name_the_key_and_the_problem(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as error:
        load_yaml_config(TrainConfig, path)
    assert str(path) in str(error.value)


def test_cli_flags_override_the_config_file():
    sac_her = next(p for p in TUNE_CONFIGS if p.name == "cpu_simple_sac_her.yaml")
    cfg = parse(["train", "--config", str(sac_her), "--seed", "7", "--sac.batch-size", "32"])
    base = load_yaml_config(TrainConfig, sac_her)
    assert cfg.seed == 7 and cfg.sac.batch_size == 32 and cfg.sac.gamma == base.sac.gamma


def test_cli_reports_a_missing_config_file():
    with pytest.raises(ConfigError, match="does not exist"):
        parse(["train", "--config", "no/such.yaml"])


def test_a_ppo_config_written_before_the_lamorel_settings_resumes_as_it_started():
    """Run directories keep their config.json; one from before `advantage_normalization` (it has
    `normalize_advantages`) keeps its per-minibatch normalisation, GAE target and value-loss weight."""
    from sacglam.config_io import from_dict

    old = {"algo": "ppo", "agent": {"model": "tiny-causal", "critic": "value"}, "ppo": {"normalize_advantages": True}}
    with pytest.warns(UserWarning, match="normalize_advantages is an earlier setting"):
        cfg = from_dict(TrainConfig, old)
    assert cfg.ppo.advantage_normalization == "minibatch" and cfg.ppo.value_target == "gae"
    assert cfg.ppo.vf_coef == 0.25  # 0.5 x vf_coef x MSE then, vf_coef x MSE now
    with pytest.warns(UserWarning):
        off = from_dict(TrainConfig, old | {"ppo": {"normalize_advantages": False, "vf_coef": 1.0}})
    assert off.ppo.advantage_normalization == "none" and off.ppo.vf_coef == 0.5
    mixed = old | {"ppo": {"normalize_advantages": True, "advantage_normalization": "rollout"}}
    with pytest.raises(ConfigError, match="replace normalize_advantages by advantage_normalization"):
        from_dict(TrainConfig, mixed)
    assert (
        from_dict(TrainConfig, {"algo": "ppo", "agent": {"critic": "value"}}).ppo.advantage_normalization == "rollout"
    )


@pytest.mark.parametrize("command", ["train", "evaluate"])
def test_the_help_names_the_config_file_flag_the_parser_does_not_list(command, capsys):
    with pytest.raises(SystemExit) as stop:
        parse([command, "--help"])
    assert stop.value.code == 0
    assert "--config FILE.yaml: a run config" in capsys.readouterr().out


def test_an_unread_env_setting_is_found_only_where_a_file_changes_it():
    """A whole config as written out (config.json, or a YAML dump of one: tuples as lists, empty
    kwargs) sets every env field at its default: nothing to refuse; a changed one is named."""
    import dataclasses
    import json

    from sacglam.config import unread_env_setting

    for env in (EnvConfig(), EnvConfig(name="tests.broken_envs:Dial", goals="train")):
        written = json.loads(json.dumps(dataclasses.asdict(env), default=str))
        assert unread_env_setting(written) is None
        assert unread_env_setting(yaml.safe_load(yaml.safe_dump(written))) is None
    dial = {"name": "tests.broken_envs:Dial", "max_steps": 10}
    assert unread_env_setting(dial).startswith("env.max_steps is a setting of playground-text, babyai-text, textworld")
    assert "env.kwargs is a setting of protocol environments" in unread_env_setting({"kwargs": {"n": 1}})


@pytest.mark.parametrize(
    "config, flags, algo, critic",
    [
        ("cpu_simple_sac_her.yaml", ["--algo", "ppo", "--agent.critic", "value"], "ppo", "value"),
        ("cpu_simple_ppo.yaml", ["--algo", "sac-her", "--agent.critic", "action"], "sac-her", "action"),
        ("cpu_simple_sac_her.yaml", ["--algo", "sac", "--sac.no-her", "--sac.sampling", "uniform"], "sac", "action"),
    ],
)
def test_algo_beside_a_file_that_names_another_critic_takes_the_flags_that_fit_them(config, flags, algo, critic):
    """The file's own blocks stay; the flags given with `--algo` may fit them to the method."""
    cfg = parse(["train", "--config", f"tune_configs/runs/{config}", *flags])
    assert (cfg.algo, cfg.agent.critic) == (algo, critic)
