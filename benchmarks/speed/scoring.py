"""Action scoring: shared-prefix forward against the naive one (one padded sequence per candidate).

For each model (the embedded SmolLM2-135M and the tiny causal / seq2seq models) and 16 and 32
environments' worth of real Playground-Text states (6 objects, some holding an object, so the
candidate counts vary), in one run:
- wall time of the naive and the shared-prefix forward (inference mode, median of repeats) and
  their ratio;
- max |log pi difference| between the two paths;
- tokens processed per state by each path (non-padding);
- achieved GFLOP/s of the shared-prefix forward (FLOPs counted by torch's FlopCounterMode on the
  ops actually run), against this machine's measured fp32 matmul rate (best of 2048^3 matmuls).
Targets on a 2-core CPU: shared-prefix at least 4x faster than naive, at least 50% of the matmul rate.

    .venv/bin/python benchmarks/speed/scoring.py [--models smollm2-135m tiny-causal tiny-seq2seq] [--states 16 32]

Prints a table and writes benchmarks/speed/results/scoring/scoring.json.
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import tyro
from torch.utils.flop_counter import FlopCounterMode

from sacglam.config import AgentConfig
from sacglam.envs import PlaygroundTextVector
from sacglam.models import GLAMAgent
from sacglam.models.scoring import CandidateScores, naive_score


@dataclass(frozen=True)
class Args:
    models: tuple[str, ...] = ("smollm2-135m", "tiny-causal", "tiny-seq2seq")
    states: tuple[int, ...] = (16, 32)
    """Batch sizes: environments' worth of states scored in one call."""
    repeats: int = 3
    """Timed repeats of each path (median reported); tiny models use 5x more."""
    output: Path = Path("benchmarks/speed/results/scoring/scoring.json")


def matmul_rate(n: int = 2048, repeats: int = 5) -> float:
    """Best fp32 GFLOP/s of an n^3 matmul with torch's default threads."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = min(_timed(lambda: a @ b) for _ in range(repeats))
    return 2 * n**3 / best / 1e9


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def playground_states(n: int, seed: int = 0) -> tuple[list[str], list[list[str]]]:
    """Real full-task states after a few random steps (some agents hold an object)."""
    vec = PlaygroundTextVector(n)
    obs, info = vec.reset(seed=seed)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(3):
        picks = [c[int(torch.randint(len(c), (1,), generator=generator))] for c in info["candidates"]]
        obs, _, _, _, info = vec.step(picks)
    return obs, info["candidates"]


def naive_log_pi(agent: GLAMAgent, observations, candidates) -> torch.Tensor:
    """The naive path, one state at a time so the full-vocabulary logits of every position fit in
    memory; returns (B, C) log pi laid out like the fast path's."""
    batch = agent.encode(observations, candidates)
    scores = []
    for b in range(len(observations)):
        prompts = agent.prompts(observations[b : b + 1], candidates[b : b + 1])
        scores.append(
            naive_score(
                agent.kind, agent.base_model, agent.tokenizer, prompts, candidates[b : b + 1], agent.end_token_id
            )
        )
    merged = CandidateScores(
        *(
            torch.cat([getattr(s, f) for s in scores])
            for f in ("log_likelihood", "candidate_features", "prompt_features")
        )
    )
    return agent.outputs_from_scores(batch, merged, with_critic=False).log_pi


def tokens_per_state(agent: GLAMAgent, observations, candidates) -> tuple[float, float]:
    """(naive, shared-prefix) non-padding tokens per state."""
    prompt_lengths = [len(ids) for ids in agent.tokenizer(agent.prompts(observations, candidates))["input_ids"]]
    action_lengths = [[len(a) for a in agent._candidate_tokens(c)] for c in candidates]
    naive = sum(P * len(ls) + sum(ls) for P, ls in zip(prompt_lengths, action_lengths))
    shared = sum(P + sum(ls) for P, ls in zip(prompt_lengths, action_lengths))
    return naive / len(observations), shared / len(observations)


def measure(agent: GLAMAgent, n_states: int, repeats: int, peak: float) -> dict:
    observations, candidates = playground_states(n_states)
    batch = agent.encode(observations, candidates)
    with torch.inference_mode():
        fast = agent(batch, with_critic=False).log_pi  # also the warm-up
        with FlopCounterMode(display=False) as counter:
            agent(batch, with_critic=False)
        flops = counter.get_total_flops()
        shared_s = statistics.median(_timed(lambda: agent(batch, with_critic=False)) for _ in range(repeats))
        # The naive path is timed once at most for big models: it is the slow one.
        naive_runs = max(1, repeats // 3) if agent.kind == "causal" else repeats
        naive_times = []
        for _ in range(naive_runs):
            start = time.perf_counter()
            slow = naive_log_pi(agent, observations, candidates)
            naive_times.append(time.perf_counter() - start)
    naive_s = statistics.median(naive_times)
    valid = batch.index.mask()
    naive_tokens, shared_tokens = tokens_per_state(agent, observations, candidates)
    return {
        "states": n_states,
        "candidates_per_state": float(batch.index.counts.float().mean()),
        "naive_tokens_per_state": naive_tokens,
        "shared_tokens_per_state": shared_tokens,
        "naive_s": naive_s,
        "shared_s": shared_s,
        "speedup": naive_s / shared_s,
        "max_abs_log_pi_diff": float((fast[valid] - slow[valid]).abs().max()),
        "shared_gflop": flops / 1e9,
        "shared_gflop_per_s": flops / shared_s / 1e9,
        "fraction_of_matmul_rate": flops / shared_s / 1e9 / peak,
    }


def main(args: Args) -> None:
    peak = matmul_rate()
    print(f"fp32 matmul rate (2048^3, {torch.get_num_threads()} threads): {peak:.0f} GFLOP/s")
    rows = []
    for model in args.models:
        agent = GLAMAgent(AgentConfig(model=model, critic="none", lora_r=0, device="cpu")).eval()
        repeats = args.repeats * (5 if model.startswith("tiny") else 1)
        for n_states in args.states:
            row = {"model": model, **measure(agent, n_states, repeats, peak)}
            rows.append(row)
            print(
                f"{model:<14} states={n_states:<3} tokens/state naive {row['naive_tokens_per_state']:6.0f} shared "
                f"{row['shared_tokens_per_state']:5.0f} | naive {row['naive_s']:7.3f}s shared {row['shared_s']:7.3f}s "
                f"x{row['speedup']:5.1f} | max|dlogpi| {row['max_abs_log_pi_diff']:.1e} | "
                f"{row['shared_gflop_per_s']:6.1f} GFLOP/s ({100 * row['fraction_of_matmul_rate']:.0f}% of matmul)"
            )
    report = {
        "benchmark": "scoring",
        "args": {k: str(v) for k, v in vars(args).items()},
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
        },
        "matmul_gflop_per_s": peak,
        "rows": rows,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main(tyro.cli(Args))
