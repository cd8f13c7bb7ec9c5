"""LoRA on the top blocks only (`agent.lora_layers`): where the adapters sit, no autograd through
the frozen blocks, the split decoder equals the decoder, and an SAC update that shares the frozen
trunk equals one that forwards every block."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaModel

from sacglam.config import AgentConfig, SACConfig
from sacglam.learner.sac import SACLearner
from sacglam.models import GLAMAgent
from sacglam.models.trunk import decoder_split
from tests.helpers import full_task_states, random_play_buffer


def make_agent(**config) -> GLAMAgent:
    torch.manual_seed(0)
    return GLAMAgent(AgentConfig(**({"model": "tiny-causal", "lora_r": 8, "critic_width": 32} | config))).eval()


def block_of(name: str) -> int | None:
    parts = name.split(".")
    return int(parts[parts.index("layers") + 1]) if "layers" in parts else None


@pytest.fixture(scope="module")
def batch_states():
    return full_task_states(8, 5)


def test_lora_sits_on_the_top_blocks_only_and_the_blocks_below_record_no_graph(batch_states):
    agent = make_agent(lora_layers=1)  # the tiny model has 2 blocks: block 0 is the frozen trunk
    lora = [n for n, p in agent.named_parameters() if p.requires_grad and "lora_" in n]
    assert lora and {block_of(n) for n in lora} == {1}
    outputs = {}
    for index, block in enumerate(agent.base_model.get_decoder().layers):
        block.register_forward_hook(lambda _m, _i, out, index=index: outputs.__setitem__(index, out))
    out = agent(agent.encode(*batch_states))  # the plain forward: no trunk handed in
    assert not outputs[0].requires_grad and outputs[0].grad_fn is None  # nothing kept for a backward
    assert outputs[1].requires_grad
    (out.log_pi[out.mask].sum() + out.q[out.mask].sum()).backward()
    frozen = [p for n, p in agent.named_parameters() if block_of(n) == 0]
    assert frozen and all(p.grad is None and not p.requires_grad for p in frozen)
    assert all(p.grad is not None for n, p in agent.named_parameters() if n in lora)


def test_lora_layers_equal_to_the_block_count_is_todays_agent(batch_states):
    every, default = make_agent(lora_layers=2), make_agent()
    assert not every.shares_frozen_trunk
    state, reference = every.trainable_state_dict(), default.trainable_state_dict()
    assert state.keys() == reference.keys()
    assert all(torch.equal(state[k], reference[k]) for k in state)
    batch = every.encode(*batch_states)
    with torch.no_grad():
        a, b = every(batch), default(batch)
    assert torch.equal(a.log_pi, b.log_pi) and torch.equal(a.q, b.q)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_top_blocks_on_the_frozen_trunk_give_the_plain_forward(batch_states, dtype):
    agent = make_agent(lora_layers=1, dtype=dtype)
    assert agent.shares_frozen_trunk
    batch = agent.encode(*batch_states)
    with torch.no_grad():
        for p in agent.parameters():  # LoRA's B starts at zero: move it so the top blocks matter
            if p.requires_grad:
                p.add_(0.05 * torch.randn_like(p))
        trunk = agent.frozen_trunk(batch)
        plain, split = agent(batch), agent(batch, trunk=trunk)
        q, mask = agent.q_values(batch, trunk)
    assert trunk is not None and not trunk.hidden.requires_grad
    assert torch.equal(plain.log_pi, split.log_pi) and torch.equal(plain.q, split.q)
    assert torch.equal(q, plain.q) and torch.equal(mask, plain.mask)


@pytest.mark.parametrize("next_policy", ["online", "target"])
def test_an_sac_update_sharing_the_frozen_trunk_equals_one_forwarding_every_block(next_policy):
    buffer = random_play_buffer(40)
    batches = [buffer.sample(16, n_step=3, mode="ratio") for _ in range(3)]
    sac = SACConfig(gamma=0.9, batch_size=16, critic_warmup_updates=1, next_policy=next_policy)
    shared, plain = SACLearner(make_agent(lora_layers=1), sac), SACLearner(make_agent(lora_layers=1), sac)
    plain.agent._split = None  # the reference: no trunk, every forward runs every block
    assert shared.agent.shares_frozen_trunk and not plain.agent.shares_frozen_trunk
    for batch in batches:
        got, want = shared.update(batch), plain.update(batch)
        for key in ("q/target", "loss/critic", "loss/policy", "loss/alpha", "entropy", "grad_norm"):
            assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-7), key
    for name, value in plain.agent.trainable_state_dict().items():
        torch.testing.assert_close(shared.agent.trainable_state_dict()[name], value, rtol=1e-5, atol=1e-6)


def test_lora_layers_are_validated():
    with pytest.raises(ValueError, match="lora_layers=0 .* must be >= 1"):
        AgentConfig(lora_layers=0)
    with pytest.raises(ValueError, match="needs lora_r > 0"):
        AgentConfig(lora_layers=2, lora_r=0)
    with pytest.raises(ValueError, match=r"lora_layers=3 but this model's model.layers has 2 transformer blocks"):
        make_agent(lora_layers=3)


def test_an_encoder_decoder_gets_lora_on_its_decoders_top_blocks_and_nothing_below_records_a_graph():
    agent = make_agent(model="tiny-seq2seq", lora_layers=1)
    lora = [n for n, p in agent.named_parameters() if p.requires_grad and "lora_" in n]
    assert lora and all(".decoder.block.1." in n for n in lora)
    assert not agent.shares_frozen_trunk
    model = agent.base_model
    outputs = {}
    for name, blocks in (("encoder", model.get_encoder().block), ("decoder", model.get_decoder().block)):
        for index, block in enumerate(blocks):
            block.register_forward_hook(
                lambda _m, _i, out, key=(name, index): outputs.__setitem__(
                    key, out[0] if isinstance(out, tuple) else out
                )
            )
    observations, candidates = full_task_states(2, 1)
    out = agent(agent.encode(observations, candidates))
    assert torch.isfinite(out.log_pi[out.mask]).all()
    assert not any(outputs[key].requires_grad for key in outputs if key != ("decoder", 1))
    assert outputs[("decoder", 1)].requires_grad


def test_lora_target_modules_outside_the_top_blocks_are_refused():
    with pytest.raises(ValueError, match="none of the LoRA target modules"):
        make_agent(lora_layers=1, lora_target_modules=("lm_head",))


class _ScaledEmbeddings(LlamaModel):
    """A decoder whose forward does more than embeddings + blocks + norm (it scales the embeddings
    in `forward`, as some architectures do): its blocks cannot be run as two halves as they are."""

    def forward(self, input_ids=None, **kwargs):
        return super().forward(inputs_embeds=self.embed_tokens(input_ids) * 2.0, **kwargs)


def test_a_decoder_whose_halves_do_not_give_its_output_is_not_split():
    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=2
    )
    model = LlamaForCausalLM(config).eval()

    def mask_for(allowed):
        return allowed[:, None]

    assert decoder_split(model.get_decoder(), 2, mask_for) is not None
    odd = _ScaledEmbeddings(config).eval()
    assert decoder_split(odd, 2, mask_for) is None
    assert decoder_split(torch.nn.Linear(2, 2), 2, mask_for) is None  # no Llama layout at all
