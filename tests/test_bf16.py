"""A bfloat16 base for GPUs, tested on CPU: the frozen LLM in bfloat16, everything that learns in
float32; log-probs close to the float32 agent's; an SAC update changes only trainable weights."""

import json
import os
import platform
import subprocess
import sys

import pytest
import torch

from sacglam.config import AgentConfig, SACConfig
from sacglam.learner.sac import SACLearner
from sacglam.models import GLAMAgent
from tests.helpers import full_task_states, random_play_buffer

# Measured on the tiny random model over 16 full-task states (docs/explanation/agent.md): |d log-likelihood|
# at most 0.006 for |log-likelihood| about 13.6, |d pi| at most 0.0006. Tolerances with margin:
LOG_LIKELIHOOD_ATOL = 0.05
PROBABILITY_ATOL = 0.01


def agent(dtype: str, **config) -> GLAMAgent:
    torch.manual_seed(0)
    return GLAMAgent(
        AgentConfig(**({"model": "tiny-causal", "critic_width": 32, "lora_r": 8, "dtype": dtype} | config))
    )


def test_the_base_is_bfloat16_and_everything_that_learns_is_float32():
    bf16 = agent("bfloat16")
    frozen = {p.dtype for p in bf16.parameters() if not p.requires_grad}
    trainable = {name: p.dtype for name, p in bf16.named_parameters() if p.requires_grad}
    assert frozen == {torch.bfloat16}
    assert set(trainable.values()) == {torch.float32}
    assert any("lora_" in n for n in trainable) and any(n.startswith("critic.") for n in trainable)


def test_bfloat16_log_probs_match_float32_within_the_stated_tolerance():
    observations, candidates = full_task_states(16, 5)
    outputs = {}
    for dtype in ("float32", "bfloat16"):
        model = agent(dtype)
        with torch.no_grad():
            outputs[dtype] = model(model.encode(observations, candidates))
    full, half = outputs["float32"], outputs["bfloat16"]
    mask = full.mask
    assert half.log_pi.dtype == half.action_log_likelihood.dtype == torch.float32
    ll_error = (full.action_log_likelihood - half.action_log_likelihood)[mask].abs().max().item()
    assert ll_error <= LOG_LIKELIHOOD_ATOL
    assert (full.probs - half.probs)[mask].abs().max().item() <= PROBABILITY_ATOL
    assert ll_error > 0.0  # the base really computed in bfloat16 (a float32 run would match exactly)


def test_an_sac_update_on_a_bfloat16_base_changes_only_trainable_weights():
    buffer = random_play_buffer(40)
    sac = SACLearner(agent("bfloat16"), SACConfig(gamma=0.9, batch_size=16, critic_warmup_updates=0))
    frozen_before = {n: p.clone() for n, p in sac.agent.named_parameters() if not p.requires_grad}
    trainable_before = {n: p.clone() for n, p in sac.agent.named_parameters() if p.requires_grad}
    metrics = sac.update(buffer.sample(16, n_step=3, mode="ratio"))
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values())
    for name, p in sac.agent.named_parameters():
        if name in frozen_before:
            assert torch.equal(p, frozen_before[name]), f"frozen {name} moved"
    moved = [
        n for n, p in sac.agent.named_parameters() if n in trainable_before and not torch.equal(p, trainable_before[n])
    ]
    assert any("lora_" in n for n in moved) and any(n.startswith("critic.") for n in moved)
    states = [s for group in sac.optimizer.state.values() for s in group.values() if torch.is_tensor(s) and s.dim()]
    assert states and all(s.dtype == torch.float32 for s in states)


def test_dtype_is_validated_and_auto_means_float32_on_cpu():
    assert AgentConfig(model="tiny-causal", device="cpu").resolved_dtype == "float32"
    assert AgentConfig(model="tiny-causal", device="cuda", lora_r=8).resolved_dtype == "bfloat16"
    assert AgentConfig(model="tiny-causal", device="cuda", lora_r=0).resolved_dtype == "float32"
    with pytest.raises(ValueError, match="lora_r=0 trains every LLM weight"):
        AgentConfig(dtype="bfloat16", lora_r=0)
    with pytest.raises(ValueError, match="choose auto, float32 or bfloat16"):
        AgentConfig(dtype="float16")  # type: ignore[arg-type]


def bfloat16_probes(**environment: str) -> list:
    """[native_cpu_bfloat16(), the CPU's own flags (AVX-512 BF16 or AMX; None off x86), the warnings
    of bfloat16 on the CPU, float32 on the CPU, bfloat16 on CUDA], in a process of its own with
    oneDNN's cap as given (`""`: none): the cap must be set before oneDNN starts."""
    code = (
        "import json, platform, torch; from sacglam.models.loading import bfloat16_on_cpu_warning as warn, "
        "native_cpu_bfloat16 as native; x86 = platform.machine().lower() in ('x86_64', 'amd64');"
        "flags = (torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()) if x86 else None;"
        "print(json.dumps([native(), flags, warn('bfloat16', 'cpu'), warn('float32', 'cpu'), warn('bfloat16', 'cuda')]))"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")}
    env |= {k: v for k, v in environment.items() if v}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("cap", ["AVX2", "avx512_core", ""])
def test_a_bfloat16_base_where_torch_would_emulate_it_warns_in_one_line(cap):
    """oneDNN capped below AVX512_CORE_BF16 has no bfloat16 instructions whatever the CPU has (an
    AVX2 CPU, or one with AVX-512 BF16 running an AVX2 one's kernels, as the suite's AVX2 switches
    do), so torch emulates bfloat16: a pinned `dtype: bfloat16` on the CPU warns in one line that
    names the fix. Uncapped, the CPU's own flags decide. float32, or a GPU, never warns."""
    native, flags, warning, float32, cuda = bfloat16_probes(ONEDNN_MAX_CPU_ISA=cap)
    assert float32 is None and cuda is None
    if platform.machine().lower() not in ("x86_64", "amd64"):
        assert native is None and warning is None  # cannot be told: no warning rather than a wrong one
        return
    assert native is (flags if cap == "" else False)
    if native:
        assert warning is None
    else:
        assert warning.startswith("warning: agent.dtype is bfloat16") and "\n" not in warning
        assert "set agent.dtype float32" in warning
