"""Encoding speed: turning a batch of states into the tensors of one shared-prefix forward.

For each model and batch size, on real full-task Playground-Text states (6 objects, a few random
steps in, so candidate counts vary), one torch thread (as each trial of the figure 2 benchmark
runs): the median wall time of `agent.encode` (tokenization, then packing: rows, positions, masks
and index tensors), of the tokenization alone (the prompts; the actions come from a warm cache,
as they do in a run), and of one inference forward of the same batch, for scale. The learner
encodes twice per SAC update (current and next states) and the inference actor once per vector
step.

    .venv/bin/python benchmarks/speed/encoding.py [--models tiny-causal tiny-seq2seq smollm2-135m] [--states 16 256]

Prints a table and writes benchmarks/speed/results/encoding/encoding.json.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

import torch
import tyro

from sacglam.config import AgentConfig
from sacglam.models import GLAMAgent
from sacglam.models.encoding import token_ids


@dataclass(frozen=True)
class Args:
    models: tuple[str, ...] = ("tiny-causal", "tiny-seq2seq", "smollm2-135m")
    states: tuple[int, ...] = (16, 256)
    """Batch sizes: 16 is the 8-steps-of-16 SAC batch, 256 the paper's batch."""
    repeats: int = 50
    """Timed calls per encoding measurement (median reported); forwards: a fifth of it for the tiny
    models, one call (after a warm-up call) for the others."""
    output: Path = Path("benchmarks/speed/results/encoding/encoding.json")


def median_seconds(fn, repeats: int) -> float:
    from scoring import _timed  # a sibling script: its folder is on sys.path when run

    fn()  # warm-up (fills the action cache)
    return statistics.median(_timed(fn) for _ in range(repeats))


def measure(agent: GLAMAgent, model: str, n_states: int, repeats: int) -> dict:
    from scoring import playground_states  # a sibling script: its folder is on sys.path when run

    observations, candidates = playground_states(n_states)
    prompts = agent.prompts(observations, candidates)
    encode_s = median_seconds(lambda: agent.encode(observations, candidates), repeats)
    tokenize_s = median_seconds(lambda: token_ids(agent.tokenizer, prompts), repeats)
    batch = agent.encode(observations, candidates)
    with torch.inference_mode():
        forward_repeats = repeats // 5 if model.startswith("tiny") else 1
        forward_s = median_seconds(lambda: agent(batch, with_critic=False), forward_repeats)
    return {
        "model": model,
        "states": n_states,
        "encode_ms": 1e3 * encode_s,
        "tokenize_ms": 1e3 * tokenize_s,
        "packing_ms": 1e3 * (encode_s - tokenize_s),
        "forward_ms": 1e3 * forward_s,
        "encode_over_forward": encode_s / forward_s,
    }


def main(args: Args) -> None:
    torch.set_num_threads(1)
    rows = []
    for model in args.models:
        agent = GLAMAgent(AgentConfig(model=model, critic="none", lora_r=0, device="cpu")).eval()
        rows += [measure(agent, model, n_states, args.repeats) for n_states in args.states]
    print(
        f"{'model':14s} {'states':>6s} {'encode ms':>10s} {'tokenize':>9s} {'packing':>8s} {'forward ms':>11s} {'enc/fwd':>8s}"
    )
    for r in rows:
        print(
            f"{r['model']:14s} {r['states']:6d} {r['encode_ms']:10.3f} {r['tokenize_ms']:9.3f} {r['packing_ms']:8.3f} "
            f"{r['forward_ms']:11.2f} {r['encode_over_forward']:8.3f}"
        )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, indent=2))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main(tyro.cli(Args))
