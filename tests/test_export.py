"""`sacglam export`: a trained run's agent loaded back with plain transformers + peft (no sacglam
code in the scoring) gives the agent's candidate log-likelihoods to 1e-5 in float32, for a LoRA
run (top-k blocks) and a full-weight run; the critic, sacglam.json and the model card; and a
folder that is not a run fails in one line."""

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from sacglam.cli import main
from sacglam.config import AgentConfig, PipelineConfig, SACConfig
from sacglam.envs import PlaygroundText
from sacglam.models import GLAMAgent
from sacglam.pipeline.run import run_pipeline
from tests.helpers import tiny_pipeline_config


def trained_run(tmp_path, name, agent: AgentConfig, random_steps: int = 64, **changes):
    cfg = tiny_pipeline_config(tmp_path, name, **({"total_env_steps": 128, "eval_every": 128} | changes))
    cfg = replace(
        cfg,
        agent=replace(agent, critic_width=32),
        sac=SACConfig.with_her(batch_size=8, critic_warmup_updates=1, random_steps=random_steps),
        pipeline=PipelineConfig(checkpoint_every=64),
    )
    run_pipeline(cfg, announce=lambda _: None)
    return cfg


def states(n=6):
    env = PlaygroundText(n_objects=3, goals="simple-train", max_steps=8)
    out = []
    for seed in range(n):
        obs, info = env.reset(seed=seed)
        out.append((obs, list(info["candidates"])))
    return out


def naive_log_likelihoods(model, tokenizer, prompt: str, candidates: list[str], policy: dict) -> list[float]:
    """Sum of each candidate's token log-probs after the prompt, one plain forward per candidate, as
    sacglam.json describes the policy (a causal model: the candidate after the prompt; an
    encoder-decoder: the prompt to the encoder, the candidate to the decoder after its start token)."""
    end = [policy["end_of_action_token"]] if policy["end_of_action_token"] is not None else []
    prompt_ids = tokenizer(prompt)["input_ids"]
    start = policy["decoder_start_token_id"]
    out = []
    for action in candidates:
        action_ids = tokenizer(action if start is not None else " " + action, add_special_tokens=False)["input_ids"]
        action_ids += end
        with torch.no_grad():
            if start is not None:
                decoder = torch.tensor([[start, *action_ids[:-1]]])
                logits = model(input_ids=torch.tensor([prompt_ids]), decoder_input_ids=decoder).logits
                log_probs = logits.float().log_softmax(-1)[0]
                out.append(sum(float(log_probs[k, t]) for k, t in enumerate(action_ids)))
            else:
                log_probs = model(input_ids=torch.tensor([prompt_ids + action_ids])).logits.float().log_softmax(-1)[0]
                out.append(sum(float(log_probs[len(prompt_ids) + k - 1, t]) for k, t in enumerate(action_ids)))
    return out


@pytest.mark.parametrize(
    "agent",
    [
        AgentConfig(model="tiny-causal", lora_r=8, lora_layers=1, critic="action"),
        AgentConfig(model="tiny-causal", lora_r=0, critic="action"),
        AgentConfig(model="tiny-seq2seq", lora_r=8, critic="action"),
    ],
    ids=["lora-top-1", "full-weight", "seq2seq-lora"],
)
def test_an_export_loads_with_plain_peft_and_scores_candidates_as_the_agent_does(tmp_path, agent):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    from sacglam.cache import cache_root

    cfg = trained_run(tmp_path, "run", agent)
    out = tmp_path / "export"
    main(["export", str(cfg.output_dir), str(out)])
    settings = json.loads((out / "sacglam.json").read_text())
    assert settings["env_steps"] >= 128 and settings["last_evaluation"]["env_steps"] >= 128
    assert settings["policy"]["scoring"] == "sum" and settings["policy"]["prompt_template"] == "plain"
    card = (out / "README.md").read_text()
    assert "## Loading it without sacglam" in card
    assert (
        f"exported from `{cfg.output_dir.resolve()}` at {settings['env_steps']} env steps of its budget of {cfg.total_env_steps}"
        in card
    )
    assert ("from peft import PeftModel" in card) == bool(agent.lora_rank)  # a whole model needs no peft
    assert '"n_objects": 3' in card and "tw_games" not in card  # the settings its environment reads
    assert card.startswith(f"---\nlibrary_name: {'peft' if agent.lora_rank else 'transformers'}\n")
    assert "base_model:" not in card  # a tiny model is on no hub
    assert f"sacglam export {cfg.output_dir.resolve()} {out.resolve()}`" in card  # where it went, no placeholder
    # the run's config, as `sacglam train --config` reads it: the same settings but where the run is
    from sacglam.config import TrainConfig
    from sacglam.config_io import load_yaml_config

    again = load_yaml_config(TrainConfig, out / "train_config.json")
    assert replace(again, output_dir=cfg.output_dir) == replace(cfg, resume=None)
    # nothing in the export names sacglam's cache by its path on this machine (peft's own card did)
    cache = str(cache_root())
    assert not [p for p in out.rglob("*") if p.is_file() and p.suffix in (".md", ".json") and cache in p.read_text()]
    # a second export into the same folder would overwrite or mix in files: refused, nothing touched
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    with pytest.raises(SystemExit) as refused:
        main(["export", str(cfg.output_dir), str(out)])
    assert refused.value.code == 2 and sorted(p.relative_to(out) for p in out.rglob("*")) == before
    by_uri = tmp_path / "by-uri"  # OUT as a URI: the files land where it points, not in a folder named `file:`
    main(["export", str(cfg.output_dir), by_uri.as_uri()])
    assert json.loads((by_uri / "sacglam.json").read_text())["checkpoint"] == settings["checkpoint"]
    assert not (Path.cwd() / "file:").exists()
    (tmp_path / "a-file").write_text("")
    with pytest.raises(SystemExit) as refused:  # under a file: one line, not NotADirectoryError
        main(["export", str(cfg.output_dir), str(tmp_path / "a-file" / "export")])
    assert refused.value.code == 2
    # into the run directory itself (docs/guides/export-and-evaluation.md): its own files stay as they are
    if not agent.lora_rank:
        kept = sorted(p.relative_to(cfg.output_dir) for p in cfg.output_dir.rglob("*"))
        main(["export", str(cfg.output_dir), str(cfg.output_dir)])
        assert set(kept) <= {p.relative_to(cfg.output_dir) for p in cfg.output_dir.rglob("*")}
        assert (cfg.output_dir / "sacglam.json").is_file() and (cfg.output_dir / "model").is_dir()

    # the agent as the run left it: its final checkpoint's trainable state
    from sacglam.runtime.checkpoint import CheckpointStore

    reference = GLAMAgent(cfg.agent).eval()
    checkpoint, _ = CheckpointStore(cfg.output_dir / "checkpoints").latest_intact()
    reference.load_trainable_state_dict(torch.load(checkpoint / "learner.pt", weights_only=False)["learner"]["agent"])

    auto = AutoModelForSeq2SeqLM if settings["base_model"]["kind"] == "seq2seq" else AutoModelForCausalLM
    assert auto.__name__ in (out / "README.md").read_text()
    if agent.lora_rank:
        assert settings["weights"] == "adapter" and (out / "adapter" / "adapter_model.safetensors").exists()
        base_path = settings["base_model"]["loaded_from"].replace("$SACGLAM_CACHE", str(cache_root()))
        base = auto.from_pretrained(base_path, dtype=torch.float32)
        model = PeftModel.from_pretrained(base, str(out / "adapter")).eval()
        tokenizer = AutoTokenizer.from_pretrained(out / "adapter")
        adapted = {k for k in model.state_dict() if "lora_A" in k}
        assert adapted
        if agent.lora_layers:
            assert all(".layers.1." in k for k in adapted)  # the top block of 2 only
    else:
        assert settings["weights"] == "model" and not (out / "adapter").exists()
        model = AutoModelForCausalLM.from_pretrained(out / "model", dtype=torch.float32).eval()
        tokenizer = AutoTokenizer.from_pretrained(out / "model")
    for observation, candidates in states():
        with torch.no_grad():
            got = reference(reference.encode([observation], [candidates]), with_critic=False)
        want = naive_log_likelihoods(model, tokenizer, observation, candidates, settings["policy"])
        torch.testing.assert_close(
            got.action_log_likelihood[0, : len(candidates)], torch.tensor(want), atol=1e-5, rtol=0
        )

    # sacglam's own way back in: GLAMAgent.from_export gives the run's agent, policy and critic
    loaded = GLAMAgent.from_export(str(out))
    observations, candidate_lists = zip(*states())
    with torch.no_grad():
        want_out = reference(reference.encode(list(observations), list(candidate_lists)))
        got_out = loaded(loaded.encode(list(observations), list(candidate_lists)))
    torch.testing.assert_close(got_out.log_pi, want_out.log_pi, atol=1e-6, rtol=0)
    torch.testing.assert_close(got_out.q, want_out.q, atol=1e-6, rtol=0)

    from safetensors.torch import load_file

    critic = load_file(out / "critic.safetensors")
    described = json.loads((out / "critic.json").read_text())
    assert described["kind"] == "action" and described["width"] == 32
    assert described["dtypes"] == {name: str(t.dtype).removeprefix("torch.") for name, t in critic.items()}
    assert torch.equal(critic["nets.0.0.weight"], reference.critic.nets[0][0].weight.detach())


def test_a_damaged_or_older_export_folder_fails_in_one_line(tmp_path, capsys):
    def message_of(settings: dict) -> str:
        (tmp_path / "sacglam.json").write_text(json.dumps(settings))
        with pytest.raises(SystemExit) as exit_info:
            main(["watch", str(tmp_path)])
        assert exit_info.value.code == 2
        message = capsys.readouterr().err.strip()
        assert "\n" not in message
        return message

    assert "lacks base_model, env_steps, last_evaluation" in message_of({"weights": "adapter", "agent": {}})
    settings = {"weights": "adapter", "agent": {}, "base_model": {}, "env_steps": 128, "last_evaluation": {}}
    assert "lacks its weights folder ('adapter'" in message_of(settings)
    (tmp_path / "adapter").mkdir()
    assert "has no run config (an older export)" in message_of(settings)


def test_a_folder_that_is_not_a_trained_run_fails_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["export", str(tmp_path), str(tmp_path / "out")])
    assert exit_info.value.code == 2
    message = capsys.readouterr().err.strip()
    assert "\n" not in message and "has no config.json" in message
    (tmp_path / "config.json").write_text(json.dumps({}))
    with pytest.raises(SystemExit):
        main(["export", str(tmp_path), str(tmp_path / "out")])
    assert "no intact checkpoint" in capsys.readouterr().err


def test_evaluate_run_repeats_the_runs_final_evaluation_exactly_next_to_random_and_the_expert(tmp_path, capsys):
    # the warm-started policy, near uniform (no SAC update before the budget: random_steps), whose
    # sampled success is not 0: a match of zeros would prove nothing
    agent = AgentConfig(model="tiny-causal", lora_r=0, critic="action")
    cfg = trained_run(tmp_path, "run", agent, random_steps=1024, warm_start_steps=60, eval_episodes=16)
    output = tmp_path / "evaluation.json"
    main(["evaluate", "--run", str(cfg.output_dir), "--output", str(output), "--no-progress"])
    report = json.loads(output.read_text())
    own = report["run_own_evaluation"]
    assert own["env_steps"] == report["env_steps"] >= 128
    overall = {k: v for k, v in report["evaluation"].items() if k.endswith("/all")}
    assert overall and all(own[k] == v for k, v in overall.items())  # the same episodes, the same weights
    assert max(v for k, v in overall.items() if "/sampled/" in k) > 0
    assert "the same figures" in capsys.readouterr().out
    assert {"simple-train / random", "simple-train / expert", "simple-test / trained greedy"} <= set(report["table"])
    # without --output, into the run's folder: never over another run's file or the baselines'
    main(["evaluate", "--run", str(cfg.output_dir), "--episodes", "8", "--no-progress"])
    assert f"wrote {Path(cfg.output_dir) / 'evaluation.json'}\n" in capsys.readouterr().out
    again = json.loads((Path(cfg.output_dir) / "evaluation.json").read_text())
    assert "run_own_evaluation" not in again  # other episodes: nothing to compare with

    # the run's export evaluates as the run does: same agent, same episodes, same figures
    main(["export", str(cfg.output_dir), str(tmp_path / "export")])
    capsys.readouterr()
    main(["evaluate", "--run", str(tmp_path / "export"), "--output", str(output), "--no-progress"])
    exported = json.loads(output.read_text())
    assert exported["env_steps"] == report["env_steps"] and exported["evaluation"] == report["evaluation"]
    assert exported["run_own_evaluation"] == own and "the same figures" in capsys.readouterr().out

    # a run killed after an evaluation but before the checkpoint that would hold those weights: its
    # newest evaluation is not of the newest checkpoint's weights, and neither the comparison nor
    # an export's card takes it for them
    killed = tmp_path / "killed"
    shutil.copytree(cfg.output_dir, killed)
    later = {k: 0.999 for k in own if k.startswith("eval/")} | {"env_steps": own["env_steps"] + 64}
    with (killed / "metrics.jsonl").open("a") as metrics:
        metrics.write(json.dumps(later) + "\n")
    main(["evaluate", "--run", str(killed), "--output", str(output), "--no-progress"])
    assert json.loads(output.read_text())["run_own_evaluation"] == own and "the same figures" in capsys.readouterr().out
    main(["export", str(killed), str(tmp_path / "killed-export")])
    settings = json.loads((tmp_path / "killed-export" / "sacglam.json").read_text())
    assert settings["last_evaluation"] == own and "0.999" not in (tmp_path / "killed-export" / "README.md").read_text()
    for damaged in (
        tmp_path / "killed-export" / "critic.safetensors",
        tmp_path / "killed-export" / "model" / "model.safetensors",
    ):
        kept = damaged.read_bytes()
        damaged.write_bytes(kept[:100])  # truncated: one line naming the file, no safetensors traceback
        with pytest.raises(SystemExit) as refused:
            main(["evaluate", "--run", str(tmp_path / "killed-export"), "--no-progress"])
        assert refused.value.code == 2 and "export the run again" in capsys.readouterr().err
        damaged.write_bytes(kept)


def test_the_final_evaluation_is_of_the_final_weights_and_evaluate_run_repeats_it(tmp_path, capsys):
    """Updates run to the budget: the updates owed there come before the final evaluation, so the
    run's last figures describe the weights of its final checkpoint (and of an export)."""
    agent = AgentConfig(model="tiny-causal", lora_r=0, critic="action")
    cfg = trained_run(tmp_path, "run", agent, random_steps=32, warm_start_steps=60, eval_episodes=16)
    rows = [json.loads(line) for line in (cfg.output_dir / "metrics.jsonl").read_text().splitlines()]
    final_updates = [r["learner/updates"] for r in rows if "learner/updates" in r][-1]
    evaluations = [r for r in rows if "run/updates_evaluated" in r]
    assert final_updates > 0 and evaluations[-1]["run/updates_evaluated"] == final_updates
    assert evaluations[-1]["env_steps"] == max(r["env_steps"] for r in rows)  # one final evaluation, at the end
    assert sum(r["env_steps"] == evaluations[-1]["env_steps"] for r in evaluations) == 1
    output = tmp_path / "evaluation.json"
    main(["evaluate", "--run", str(cfg.output_dir), "--output", str(output), "--no-progress"])
    report = json.loads(output.read_text())
    assert "the same figures" in capsys.readouterr().out
    assert all(report["run_own_evaluation"][k] == v for k, v in report["evaluation"].items() if k.endswith("/all"))


def test_watch_writes_transcripts_a_person_reads_with_every_candidate_its_probability_and_q(tmp_path, capsys):
    from html.parser import HTMLParser

    cfg = trained_run(tmp_path, "run", AgentConfig(model="tiny-causal", lora_r=8, critic="action"))
    report_linked = (
        cfg.output_dir / "transcripts" / "transcripts.json"
    )  # the final evaluation's, which the report links
    linked_before = report_linked.read_text() if report_linked.exists() else None
    main(["watch", str(cfg.output_dir), "--episodes", "3", "--mode", "sampled"])
    out = cfg.output_dir / "watch"
    assert (report_linked.read_text() if report_linked.exists() else None) == linked_before  # left alone
    assert "of 3 episodes succeeded" in capsys.readouterr().out
    (tmp_path / "a-file").write_text("")
    with pytest.raises(SystemExit) as refused:  # refused before any episode runs
        main(["watch", str(cfg.output_dir), "--out", str(tmp_path / "a-file" / "watch")])
    assert refused.value.code == 2 and "a-file is a file" in capsys.readouterr().err
    episodes = json.loads((out / "transcripts.json").read_text())
    assert len(episodes) == 3 and len({e["goal_type"] for e in episodes}) == 2  # goal types in turn
    for episode in episodes:
        assert 1 <= len(episode["steps"]) <= 8
        for step in episode["steps"]:
            assert abs(sum(step["probabilities"]) - 1) < 1e-5 and step["action"] in step["candidates"]
            assert len(step["values"]) == len(step["candidates"])  # Q per candidate: an action critic
            assert step["observation"].startswith(f"Goal: {episode['goal']}")
    text = (out / "transcripts.txt").read_text()
    first = episodes[0]["steps"][0]
    assert f"-> {first['probabilities'][first['candidates'].index(first['action'])]:6.3f}" in text

    class Tables(HTMLParser):
        tables, taken, open_tags = 0, 0, []

        def handle_starttag(self, tag, attrs):
            self.tables += tag == "table"
            self.taken += tag == "tr" and ("class", "taken") in attrs

    page = Tables()
    page.feed((out / "transcripts.html").read_text())
    steps = sum(len(e["steps"]) for e in episodes)
    assert page.tables == steps and page.taken == steps  # one table per step, the action taken marked
    assert "<script" not in (out / "transcripts.html").read_text()  # opens without a server or scripts


def test_evaluate_run_takes_the_runs_environment_for_env_flags_and_its_goal_sets(tmp_path, capsys):
    """`--env.*` changes the run's environment (not the default one); a run evaluated on its train
    goals only is evaluated there; `--config` gives another environment; a bad --output fails
    before anything runs."""
    agent = AgentConfig(model="tiny-causal", lora_r=8, critic="action")
    cfg = trained_run(tmp_path, "run", agent, eval_held_out=False)
    output = tmp_path / "evaluation.json"
    main(["evaluate", "--run", str(cfg.output_dir), "--env.max-steps", "4", "--output", str(output), "--no-progress"])
    report = json.loads(output.read_text())
    policies = ("trained sampled", "trained greedy", "random", "expert")
    assert set(report["table"]) == {f"simple-train / {p}" for p in policies}
    assert all(k.split("/")[1] == "simple-train" for k in report["evaluation"])  # success and the critic measure
    with pytest.raises(SystemExit):
        main(["evaluate", "--run", str(cfg.output_dir), "--output", str(tmp_path)])  # a directory

    # --config's env block changes the run's environment (one naming no other), here to one step:
    # no plan fits in it, and the run's goal set and objects stay (the table's row names them)
    one_step = tmp_path / "one_step.yaml"
    one_step.write_text("env:\n  max_steps: 1\nsac:\n  batch_size: 4\n")
    main(
        ["evaluate", "--run", str(cfg.output_dir), "--config", str(one_step), "--output", str(output), "--no-progress"]
    )
    short = json.loads(output.read_text())
    assert short["env_changes"] == {"max_steps": 1} and short["env"]["n_objects"] == cfg.env.n_objects
    printed = capsys.readouterr().out
    assert ", on the run's environment with max_steps 1" in printed
    assert "not the run's evaluation (another environment)" in printed
    expert = "simple-train / expert"
    assert short["table"][expert]["all"]["success"] == 0.0 < report["table"][expert]["all"]["success"]
    no_env = tmp_path / "no_env.yaml"
    no_env.write_text("seed: 3\n")
    with pytest.raises(SystemExit):
        main(["evaluate", "--run", str(cfg.output_dir), "--config", str(no_env), "--output", str(output)])
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"sacglam: --config {no_env} has no env block") and "drop --config" in line
    unread = tmp_path / "unread.yaml"  # a setting the run's environment (Playground-Text) does not read
    unread.write_text("env:\n  level: GoToLocal\n")
    with pytest.raises(SystemExit):
        main(["evaluate", "--run", str(cfg.output_dir), "--config", str(unread), "--output", str(output)])
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(f"sacglam: {unread}: env.level is a setting of")


def test_watch_refuses_held_out_goals_an_environment_does_not_have(tmp_path, capsys):
    from sacglam.config import EnvConfig

    env = EnvConfig(name="sacglam.envs.sanity:SayWord", goals="train")
    cfg = trained_run(tmp_path, "run", AgentConfig(model="tiny-causal", lora_r=0, critic="action"), env=env)
    with pytest.raises(SystemExit):
        main(["watch", str(cfg.output_dir), "--held-out"])
    assert "no held-out goal set" in capsys.readouterr().err
