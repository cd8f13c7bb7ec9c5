"""What the GPU study of SmolLM2 (`tune_configs/runs/gpu_smollm2_*.yaml`) would cost on this CPU.

The study's agents (LoRA r16 on the top 4 blocks; SAC: twin action critics of width 1024; PPO: a
value head) on the embedded SmolLM2-135M, in `--dtype` (float32 by default: on a CPU without
AVX-512 BF16 or AMX, torch emulates bfloat16, several times slower), `--threads` threads, timed on
the simplified task's own states (random play):
- the prompt's and the candidates' token counts (what a forward's length is made of);
- acting: one forward of 32 states (the 32 environments' step), without the critic;
- one SAC-GLAM update at the study's batch (128) on a HER replay buffer of random play;
- one PPO-GLAM update (the study's settings, `--ppo-rows` rollout rows, 1 epoch): the old-policy
  pass and one minibatch step per minibatch, from which 8 epochs over a 1,024-row rollout follow.
From these, the projected hours of one run to 15,360 env steps at the study's gradient work
(SAC: 2 updates of 128 per 32 env steps; PPO: 8 epochs), and of its evaluations (256 episodes per
goal set, sampled and greedy, at about `--eval-steps-per-episode` states each), against what a
session can afford.

    .venv/bin/python benchmarks/speed/smollm2_cpu_cost.py [--threads 2] [--dtype float32]

Prints a table and writes benchmarks/speed/results/smollm2_cpu_cost/smollm2_cpu_cost.json.
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path

import tyro

SAC_CONFIG = "tune_configs/runs/gpu_smollm2_sac_her.yaml"
PPO_CONFIG = "tune_configs/runs/gpu_smollm2_ppo.yaml"
ENV_STEPS = 15_360


@dataclass(frozen=True)
class Args:
    threads: int = 2
    dtype: str = "float32"
    repeats: int = 2
    """Timed repeats of each measurement (median), after one warm-up."""
    ppo_rows: int = 256
    eval_steps_per_episode: float = 6.0
    """States per evaluation episode (8 at most; about 6 for a policy near the zero-shot one)."""
    output: Path = Path("benchmarks/speed/results/smollm2_cpu_cost/smollm2_cpu_cost.json")


def timed(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def random_play(vector_steps: int, envs: int = 32):
    """(observations, candidates, replay buffer with HER) of uniform-random simplified-task play."""
    import random

    from sacglam.envs import PlaygroundTextVector
    from sacglam.replay_actor.buffer import ReplayBuffer
    from sacglam.rollout_workers.recorder import EpisodeRecorder

    vec = PlaygroundTextVector(envs, n_objects=3, goals="simple-train", max_steps=8)
    obs, info = vec.reset(seed=0)
    recorder, rng, buffer = EpisodeRecorder(envs), random.Random(0), ReplayBuffer(gamma=0.9, her=True)
    recorder.start(obs, info)
    states: tuple[list[str], list[list[str]]] = ([], [])
    for _ in range(vector_steps):
        states[0].extend(obs)
        states[1].extend(info["candidates"])
        actions = [rng.choice(c) for c in info["candidates"]]
        obs, r, te, tr, info = vec.step(actions)
        for episode in recorder.record(actions, obs, r, te, tr, info):
            buffer.add(episode)
    return states, buffer


def main(args: Args) -> None:
    import numpy as np
    import torch

    from sacglam.config import TrainConfig
    from sacglam.config_io import load_yaml_config
    from sacglam.learner.ppo import PPOLearner
    from sacglam.learner.ppo_rollout import rollout_from_segments
    from sacglam.learner.sac import SACLearner
    from sacglam.models import GLAMAgent
    from sacglam.rollout_workers.worker import RolloutWorker

    torch.set_num_threads(args.threads)
    sac_cfg = load_yaml_config(TrainConfig, SAC_CONFIG)
    ppo_cfg = load_yaml_config(TrainConfig, PPO_CONFIG)
    (observations, candidates), buffer = random_play(24)
    torch.manual_seed(0)
    sac_agent = GLAMAgent(replace(sac_cfg.agent, device="cpu", dtype=args.dtype))  # type: ignore[arg-type]
    tokenizer = sac_agent.tokenizer
    prompts = sac_agent.prompts(observations[:256], candidates[:256])
    prompt_tokens = statistics.mean(len(tokenizer(p)["input_ids"]) for p in prompts)
    candidate_tokens = statistics.mean(sum(len(tokenizer(" " + a)["input_ids"]) for a in c) for c in candidates[:256])
    batch = sac_agent.encode(observations[:32], candidates[:32])
    with torch.inference_mode():
        act = timed(lambda: sac_agent(batch, with_critic=False), args.repeats)
    learner = SACLearner(sac_agent, replace(sac_cfg.sac, critic_warmup_updates=0))
    rng_batch = buffer.sample(sac_cfg.sac.batch_size, n_step=sac_cfg.sac.n_step, mode="ratio")
    sac_update = timed(lambda: learner.update(rng_batch), args.repeats)

    torch.manual_seed(0)
    ppo_agent = GLAMAgent(replace(ppo_cfg.agent, device="cpu", dtype=args.dtype))  # type: ignore[arg-type]
    one_epoch = replace(ppo_cfg.ppo, epochs=1)
    episodes = RolloutWorker(ppo_cfg.env, 32, seed=0).collect(args.ppo_rows // 32 + 1, None).episodes
    rollout, _ = rollout_from_segments(ppo_agent, episodes, one_epoch, np.random.default_rng(0))
    rows = len(rollout.actions)
    ppo_learner = PPOLearner(ppo_agent, one_epoch, seed=0)
    ppo_epoch = timed(lambda: ppo_learner.update(rollout), args.repeats)  # old-policy pass + 1 epoch
    shares = [share for _, share in ppo_learner.minibatches(rows)]
    ppo_pass = timed(lambda: ppo_learner.old_policy(rollout, shares), args.repeats)

    per_32 = ENV_STEPS // 32
    ppo_rollouts = ENV_STEPS // ppo_cfg.ppo.rollout_steps
    # A 1,024-row rollout: the old-policy pass once, then 8 epochs of steps, each scaled by rows.
    scale = ppo_cfg.ppo.rollout_steps / rows
    ppo_rollout_s = scale * (ppo_pass + ppo_cfg.ppo.epochs * max(0.0, ppo_epoch - ppo_pass))
    evaluation_states = 2 * 2 * sac_cfg.eval_episodes * args.eval_steps_per_episode  # sets x modes
    evaluation_s = evaluation_states / 32 * act
    projection = {
        "sac_acting_h": per_32 * act / 3600,
        "sac_updates_h": per_32 * sac_cfg.sac.gradient_steps * sac_update / 3600,
        "ppo_acting_h": per_32 * act / 3600,
        "ppo_updates_h": ppo_rollouts * ppo_rollout_s / 3600,
        "one_evaluation_h": evaluation_s / 3600,
    }
    projection["sac_run_h"] = (
        projection["sac_acting_h"] + projection["sac_updates_h"] + 2 * projection["one_evaluation_h"]
    )
    projection["ppo_run_h"] = projection["ppo_acting_h"] + projection["ppo_updates_h"] + projection["one_evaluation_h"]
    report = {
        "benchmark": "smollm2_cpu_cost",
        "cpu": platform.processor() or platform.machine(),
        "threads": args.threads,
        "dtype": args.dtype,
        "prompt_tokens_mean": prompt_tokens,
        "candidate_tokens_per_state_mean": candidate_tokens,
        "act_32_states_s": act,
        "sac_update_s": sac_update,
        "sac_batch": sac_cfg.sac.batch_size,
        "ppo_one_epoch_s": ppo_epoch,
        "ppo_old_policy_pass_s": ppo_pass,
        "ppo_rows": rows,
        "ppo_rollout_update_s": ppo_rollout_s,
        "projection": projection,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2))
    print(f"{report['cpu']}, {args.threads} threads, {args.dtype}")
    print(f"prompt {prompt_tokens:.0f} tokens + candidates {candidate_tokens:.0f} tokens per state")
    print(f"acting: {act:.2f} s per 32 states ({32 / act:.1f} states/s)")
    print(f"SAC update, batch {sac_cfg.sac.batch_size}: {sac_update:.1f} s")
    print(
        f"PPO: old-policy pass + 1 epoch over {rows} rows: {ppo_epoch:.1f} s; a 1,024-row rollout's update ~{ppo_rollout_s:.0f} s"
    )
    print("projected hours to 15,360 env steps: " + ", ".join(f"{k} {v:.1f}" for k, v in projection.items()))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main(tyro.cli(Args))
