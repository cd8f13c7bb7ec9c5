"""A cost model of the paper's GPU form: FLOPs per env step of SAC-GLAM with Flan-T5-base at the
paper's batch and update ratio, counted from this code, and the GPU time they predict.

Builds the Flan-T5-base architecture (the config below is flan-t5-base's: 12+12 layers, d_model
768, gated-GELU FFN 2048, 12 heads, vocabulary 32,128; random weights, since FLOPs do not depend
on them and nothing may be downloaded) as a `GLAMAgent` with the paper's agent (LoRA r 16 on the
attention projections, action critic of two 1024-unit layers) and counts, with torch's
`FlopCounterMode` (matmuls, attention and convolutions of the ops actually run):
- one inference forward over a batch of full-task states (what a rollout step costs per state);
- one `SACLearner.update` (critic, policy and alpha losses, backward, target forward for the next
  states) on a replay batch of full-task transitions (HER on, 50/50), per sample.
Per env step: inference per state + (gradient_steps x batch_size / update_every) x update per sample
(the paper: 2 x 256 / 32 = 16 samples per env step). States come from uniform-random full-task
episodes; the prompts are tokenized with the tiny models' word-level tokenizer (one token per
word), so the counts are scaled by the ratio of SmolLM2's subword tokens to words on the same
texts (Flan-T5's SentencePiece splits the same rare words, `carnivorous`, `chameleon`, ...).

    .venv/bin/python benchmarks/speed/cost_model.py [--batch 32] [--h100-utilization 0.3]

Prints a table and writes benchmarks/speed/results/cost_model/cost_model.json. Nothing here is a GPU measurement:
it is arithmetic on counted FLOPs and a stated utilisation.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import tyro
from torch.utils.flop_counter import FlopCounterMode
from transformers import T5Config, T5ForConditionalGeneration

from sacglam.config import AgentConfig, SACConfig
from sacglam.envs import PlaygroundTextVector
from sacglam.learner.sac import SACLearner
from sacglam.models import GLAMAgent
from sacglam.models.loading import LanguageModel, load_language_model
from sacglam.models.tiny import word_level_tokenizer
from sacglam.replay_actor.buffer import ReplayBuffer
from sacglam.rollout_workers.recorder import EpisodeRecorder

H100_BF16_DENSE_TFLOPS = 989.0  # H100 SXM, bf16 tensor cores, dense (NVIDIA's datasheet)
V100_FP16_TFLOPS = 125.0  # V100 SXM2 32GB, fp16 tensor cores (the paper's GPUs)
PAPER_GPU_HOURS_PER_SEED = 80.0  # the paper: 4 V100 x 20 h per seed, 400k env steps
PAPER_ENV_STEPS = 400_000


@dataclass(frozen=True)
class Args:
    batch: int = 32
    """States per counted inference forward and samples per counted update (FLOPs scale linearly
    with it; the paper's 256 is reached by scaling)."""
    h100_utilization: float = 0.3
    """Fraction of the H100's bf16 dense peak the run is assumed to reach (stated, not measured)."""
    seed: int = 0
    output: Path = Path("benchmarks/speed/results/cost_model/cost_model.json")


def flan_t5_base_shape() -> LanguageModel:
    config = T5Config(  # type: ignore[call-arg]  # T5Config takes some of these through **kwargs
        vocab_size=32128,
        d_model=768,
        d_kv=64,
        d_ff=2048,
        num_layers=12,
        num_decoder_layers=12,
        num_heads=12,
        feed_forward_proj="gated-gelu",
        dropout_rate=0.0,
        tie_word_embeddings=False,
        pad_token_id=0,
        eos_token_id=3,
        decoder_start_token_id=0,
    )
    torch.manual_seed(0)
    model = T5ForConditionalGeneration(config).eval()
    return LanguageModel(model=model, tokenizer=word_level_tokenizer(), kind="seq2seq", name="flan-t5-base shape")


def filled_buffer(seed: int, sac: SACConfig) -> tuple[ReplayBuffer, list[str], list[tuple[str, ...]]]:
    """A replay buffer of uniform-random full-task episodes, and the last step's states."""
    vec = PlaygroundTextVector(32, n_objects=6, goals="train", max_steps=30)
    obs, info = vec.reset(seed=seed)
    recorder, rng = EpisodeRecorder(32), random.Random(seed)
    buffer = ReplayBuffer(sac.buffer_capacity, sac.gamma, her=True, her_max_goals=sac.her_max_goals, seed=seed)
    recorder.start(obs, info)
    for _ in range(120):
        actions = [rng.choice(c) for c in info["candidates"]]
        obs, rewards, terminated, truncated, info = vec.step(actions)
        for episode in recorder.record(actions, obs, rewards, terminated, truncated, info):
            buffer.add(episode)
    return buffer, list(obs), [tuple(c) for c in info["candidates"]]


def subword_ratio(texts: list[str]) -> float:
    """SmolLM2's tokens per word-level token on `texts` (how much a subword tokenizer adds)."""
    subword = load_language_model("smollm2-135m").tokenizer
    words = word_level_tokenizer()
    return sum(len(subword(t)["input_ids"]) for t in texts) / sum(len(words(t)["input_ids"]) for t in texts)


def counted(fn) -> float:
    with FlopCounterMode(display=False) as counter:
        fn()
    return float(counter.get_total_flops())


def main(args: Args) -> None:
    torch.set_num_threads(2)
    sac = replace(SACConfig.with_her(), critic_warmup_updates=0)  # paper's table 3; count a full update
    agent_config = AgentConfig(model="tiny-seq2seq", lora_r=16, device="cpu")  # the paper's LoRA and critic
    agent = GLAMAgent(agent_config, language_model=flan_t5_base_shape())
    buffer, observations, candidates = filled_buffer(args.seed, sac)
    observations, candidates = observations[: args.batch], candidates[: args.batch]
    with torch.no_grad():
        inference = counted(lambda: agent(agent.encode(observations, candidates))) / len(observations)
    learner = SACLearner(agent, sac)
    batch = buffer.sample(args.batch, sac.n_step, sac.sampling, sac.relabeled_fraction)
    update = counted(lambda: learner.update(batch)) / args.batch
    samples_per_env_step = sac.gradient_steps * sac.batch_size / sac.update_every
    ratio = subword_ratio(batch.observations + [a for c in batch.candidates for a in c])
    per_env_step_words = inference + samples_per_env_step * update
    per_env_step = per_env_step_words * ratio
    total = per_env_step * PAPER_ENV_STEPS
    h100_hours = total / (H100_BF16_DENSE_TFLOPS * 1e12 * args.h100_utilization) / 3600
    paper_capacity = PAPER_GPU_HOURS_PER_SEED * 3600 * V100_FP16_TFLOPS * 1e12
    params = sum(p.numel() for p in agent.parameters())
    trainable = sum(p.numel() for p in agent.parameters() if p.requires_grad)
    report = {
        "model": "flan-t5-base architecture (random weights)",
        "parameters": params,
        "trainable_parameters": trainable,
        "sac": {k: getattr(sac, k) for k in ("batch_size", "update_every", "gradient_steps", "n_step")},
        "counted_batch": args.batch,
        "inference_gflop_per_state_words": inference / 1e9,
        "update_gflop_per_sample_words": update / 1e9,
        "update_in_inference_forwards": update / inference,
        "samples_per_env_step": samples_per_env_step,
        "subword_tokens_per_word": ratio,
        "gflop_per_env_step": per_env_step / 1e9,
        "learner_share": samples_per_env_step * update / per_env_step_words,
        "pflop_400k_env_steps": total / 1e15,
        "h100_utilization_assumed": args.h100_utilization,
        "h100_hours_400k_env_steps": h100_hours,
        "paper_v100_hours_per_seed": PAPER_GPU_HOURS_PER_SEED,
        "paper_implied_v100_utilization": total / paper_capacity,
    }
    rows = [
        ("parameters (trainable)", f"{params / 1e6:.0f}M ({trainable / 1e6:.1f}M)"),
        ("inference forward, per state", f"{inference / 1e9 * ratio:.2f} GFLOP"),
        ("SAC update, per sample", f"{update / 1e9 * ratio:.2f} GFLOP ({update / inference:.1f} inference forwards)"),
        ("samples per env step (2 x 256 / 32)", f"{samples_per_env_step:.0f}"),
        ("per env step", f"{per_env_step / 1e9:.1f} GFLOP (learner {100 * report['learner_share']:.1f}%)"),
        ("400k env steps", f"{total / 1e15:.0f} PFLOP"),
        (
            f"one H100 at {100 * args.h100_utilization:.0f}% of bf16 dense peak",
            f"{h100_hours:.1f} GPU-hours per seed",
        ),
        (
            "the paper: 80 V100-hours per seed",
            f"implies {100 * report['paper_implied_v100_utilization']:.1f}% of the V100s' fp16 peak",
        ),
    ]
    print(f"Flan-T5-base SAC-GLAM cost model (tokens scaled by {ratio:.2f} subword tokens per word)")
    for name, value in rows:
        print(f"  {name:<45} {value}")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main(tyro.cli(Args))
