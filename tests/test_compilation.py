"""`agent.compile`: the compiled agent computes what the eager one computes.

Compilation fuses kernels, so sums may be reordered: outputs are compared within float32 rounding
(measured differences are stated next to the tolerances). The weights are inputs of the compiled
graphs, never constants baked into them: swapping the target critic's weights in and loading a
learner's weights must change a compiled forward exactly as they change an eager one."""

import pytest
import torch
import torch._dynamo.config
import torch._dynamo.utils
import torch._inductor.config

from sacglam.config import AgentConfig, SACConfig
from sacglam.learner.sac import SACLearner, swapped_parameters
from sacglam.models import GLAMAgent, compilation
from tests.helpers import full_task_states, random_play_buffer

pytestmark = pytest.mark.slow  # each process compiles its graphs once: about 1-2 min on a cold cache


@pytest.fixture(autouse=True)
def no_silent_eager_fallback():
    """Past Dynamo's recompile limit a block would quietly run eager and every comparison here
    would pass without testing compiled code: make that an error instead."""
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        yield


def compiled_graphs() -> int:
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


# Measured (tiny models, 2 threads): log pi differs by at most 5.7e-6 (causal; its mean is about
# -10) and 2.9e-6 (seq2seq), Q by 7.5e-7 (|Q| about 0.15), losses by 3e-8, weights after two SAC
# updates by 6.2e-7. Tolerances with a margin of about 16x:
OUTPUT_ATOL = 1e-4
WEIGHT_ATOL = 1e-5


def agent_pair(model: str, **config) -> tuple[GLAMAgent, GLAMAgent]:
    """(eager, compiled) agents with the same weights."""
    settings = {"model": model, "lora_r": 16, "critic_width": 32, "n_critics": 2, "device": "cpu"} | config
    torch.manual_seed(0)
    eager = GLAMAgent(AgentConfig(**settings))
    compiled = GLAMAgent(AgentConfig(**settings, compile=True))
    compiled.load_state_dict(eager.state_dict())
    return eager, compiled


def assert_same_outputs(a, b) -> None:
    mask = a.mask
    assert torch.equal(mask, b.mask)
    assert (a.log_pi - b.log_pi)[mask].abs().max().item() <= OUTPUT_ATOL
    if a.q is not None:
        assert (a.q - b.q)[mask].abs().max().item() <= OUTPUT_ATOL


def test_compile_keeps_parameter_names_and_compiles_every_block():
    eager, compiled = agent_pair("tiny-causal", lora_r=8)
    assert [n for n, _ in eager.named_parameters()] == [n for n, _ in compiled.named_parameters()]
    assert eager.trainable_state_dict().keys() == compiled.trainable_state_dict().keys()
    blocks = compilation.transformer_blocks(compiled.llm)
    assert len(blocks) == compiled.base_model.config.num_hidden_layers
    assert all(b._compiled_call_impl is not None for b in blocks)
    assert all(b._compiled_call_impl is None for b in compilation.transformer_blocks(eager.llm))


def test_compiled_sac_updates_equal_eager_ones_and_honour_swapped_and_loaded_weights():
    buffer = random_play_buffer(40)
    batches = [buffer.sample(16, n_step=3, mode="ratio") for _ in range(2)]
    eager, compiled = agent_pair("tiny-causal", lora_r=0)
    config = SACConfig(gamma=0.9, batch_size=16, critic_warmup_updates=0)
    learners = [SACLearner(eager, config), SACLearner(compiled, config)]
    graphs = compiled_graphs()
    for batch in batches:  # gradients through the compiled blocks; targets under no_grad
        metrics = [learner.update(batch) for learner in learners]
        for key in ("loss/critic", "loss/policy", "q/target"):
            assert metrics[0][key] == pytest.approx(metrics[1][key], abs=OUTPUT_ATOL)
    assert compiled_graphs() > graphs  # the compiled agent ran compiled code
    after = [a.trainable_state_dict() for a in (eager, compiled)]
    moved = max((after[1][n] - after[0][n]).abs().max().item() for n in after[0])
    assert moved <= WEIGHT_ATOL

    observations, candidates = full_task_states(8, 4)
    encoded = eager.encode(observations, candidates)
    # Other weights swapped in (as the target critic is): both agents see them.
    other = {n: p.detach() + 0.05 * torch.randn_like(p) for n, p in eager.named_parameters() if p.requires_grad}
    with torch.no_grad():
        live = [dict(a.named_parameters()) for a in (eager, compiled)]
        with swapped_parameters(live[0], other), swapped_parameters(live[1], other):
            swapped = [a(encoded) for a in (eager, compiled)]
        plain = compiled(encoded)
    assert_same_outputs(*swapped)
    assert (swapped[1].log_pi - plain.log_pi)[plain.mask].abs().max().item() > 100 * OUTPUT_ATOL
    # Acting under inference mode (its graph compiled now, with the current weights), then the
    # weights a learner sends loaded in place, as the inference server loads them.
    with torch.inference_mode():
        before = compiled(encoded)
    compiled.load_trainable_state_dict(other)
    eager.load_trainable_state_dict(other)
    with torch.inference_mode():
        loaded = compiled(encoded)
        assert_same_outputs(eager(encoded), loaded)
    assert (loaded.log_pi - before.log_pi)[loaded.mask].abs().max().item() > 100 * OUTPUT_ATOL


def test_a_compiled_seq2seq_agent_scores_like_the_eager_one():
    eager, compiled = agent_pair("tiny-seq2seq", lora_r=8)
    observations, candidates = full_task_states(4, 4)
    encoded = eager.encode(observations, candidates)
    graphs = compiled_graphs()
    with torch.no_grad():
        assert_same_outputs(eager(encoded), compiled(encoded))
    assert compiled_graphs() > graphs


def test_freezing_which_would_bake_weights_in_is_refused():
    with (
        torch._inductor.config.patch(freezing=True),
        pytest.raises(compilation.CompilationUnavailableError, match="freezing") as error,
    ):
        GLAMAgent(AgentConfig(model="tiny-causal", lora_r=16, critic_width=32, device="cpu", compile=True))
    assert "\n" not in str(error.value)


def test_without_a_cpu_compiler_compile_fails_with_one_line(monkeypatch):
    from torch._inductor import cpp_builder

    def no_compiler():
        raise RuntimeError("no g++")

    monkeypatch.setattr(cpp_builder, "get_cpp_compiler", no_compiler)
    with pytest.raises(compilation.CompilationUnavailableError, match="install g\\+\\+.*agent.compile false") as error:
        GLAMAgent(AgentConfig(model="tiny-causal", lora_r=16, critic_width=32, device="cpu", compile=True))
    assert "\n" not in str(error.value)
