"""Inputs several test modules share: full-task states, a small replay buffer of random play, a
tiny pipeline run's config, and a stand-in for a GPU tensor."""

from __future__ import annotations

import importlib.util
import random
import sys
from dataclasses import replace
from pathlib import Path

import torch

from sacglam.config import AgentConfig, PipelineConfig, SACConfig, TrainConfig
from sacglam.envs import PlaygroundTextVector
from sacglam.replay_actor.buffer import ReplayBuffer
from sacglam.rollout_workers.recorder import EpisodeRecorder


def full_task_states(n: int, steps: int) -> tuple[list[str], list[list[str]]]:
    """(observations, candidates) of n full-task environments after `steps` uniform-random steps."""
    vec = PlaygroundTextVector(n, n_objects=6, goals="train", max_steps=30)
    obs, info = vec.reset(seed=0)
    rng = random.Random(0)
    for _ in range(steps):
        obs, *_, info = vec.step([rng.choice(c) for c in info["candidates"]])
    return obs, info["candidates"]


def random_play_buffer(vector_steps: int) -> ReplayBuffer:
    """A HER buffer (gamma 0.9) of the simplified task's episodes: 8 environments, uniform-random
    actions, `vector_steps` steps of all 8."""
    vec = PlaygroundTextVector(8, n_objects=3, goals="simple-train", max_steps=8)
    obs, info = vec.reset(seed=0)
    recorder, rng, buffer = EpisodeRecorder(8), random.Random(0), ReplayBuffer(gamma=0.9, her=True)
    recorder.start(obs, info)
    for _ in range(vector_steps):
        actions = [rng.choice(c) for c in info["candidates"]]
        obs, r, te, tr, info = vec.step(actions)
        for episode in recorder.record(actions, obs, r, te, tr, info):
            buffer.add(episode)
    return buffer


def smollm2_architecture(directory, layers: int = 2, hidden: int = 64) -> str:
    """A model directory with SmolLM2-135M's tokenizer (49,152 tokens) and architecture, shrunk to
    `layers` blocks of width `hidden`, with seeded random weights (the embedded model's weights
    are not read). Its path, for `AgentConfig(model=...)`."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from sacglam.models.loading import embedded_model_dir

    source = embedded_model_dir("smollm2-135m")
    config = AutoConfig.from_pretrained(source)
    config.num_hidden_layers, config.hidden_size, config.intermediate_size = layers, hidden, hidden * 8 // 3
    config.num_attention_heads = config.num_key_value_heads = 1
    config.head_dim = hidden
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(directory)
    AutoTokenizer.from_pretrained(source).save_pretrained(directory)
    return str(directory)


ROOT = Path(__file__).resolve().parents[1]
TINY_AGENT = AgentConfig(model="tiny-causal", lora_r=0, critic_width=32)


def tiny_pipeline_config(tmp_path, name, **changes) -> TrainConfig:
    """A small SAC-GLAM+HER pipeline run of the tiny model (512 env steps, 2 rollout workers,
    checkpoints every 256) in `tmp_path / name`, with `changes` applied."""
    base = TrainConfig(
        algo="sac-her",
        agent=TINY_AGENT,
        sac=SACConfig.with_her(batch_size=16, random_steps=64),
        num_envs=8,
        total_env_steps=512,
        eval_every=256,
        eval_episodes=4,
        log_every=64,
        warm_start_steps=2,
        output_dir=tmp_path / name,
        progress=False,
        pipeline=PipelineConfig(rollout_workers=2, checkpoint_every=256),
    )
    return replace(base, **changes)


def load_benchmark(name: str):
    """The script `benchmarks/<kind>/<name>.py` as a module (benchmarks are scripts, not a package,
    in one folder per kind: speed, studies, suite, gpu)."""
    (path,) = (ROOT / "benchmarks").glob(f"*/{name}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the script loads
    spec.loader.exec_module(module)
    return module


class OnDevice(torch.Tensor):
    """A CPU tensor that says it lives on `cuda:0`: a stand-in for a GPU tensor on a machine
    without one. Operations on it give `OnDevice` tensors (torch keeps the subclass), and
    `.cpu()` / `.to("cpu")` give a plain CPU copy, as a copy to the host does; so a value built
    from it that was never copied to the host still says `cuda:0`."""

    @staticmethod
    def of(tensor: torch.Tensor) -> OnDevice:
        return tensor.as_subclass(OnDevice)

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return torch.device("cuda", 0)

    def cpu(self, *args, **kwargs) -> torch.Tensor:  # type: ignore[override]
        return self.as_subclass(torch.Tensor).clone()

    def to(self, *args, **kwargs):  # type: ignore[override]
        target = kwargs.get("device", args[0] if args else None)
        if target is not None and not isinstance(target, torch.dtype) and torch.device(target).type == "cpu":
            return self.as_subclass(torch.Tensor).clone()
        return super().to(*args, **kwargs)
