"""`agent.critic_weights: own`: the critic's own copy of the top blocks. The policy is the shared
agent's, the critic starts as its copy, each loss reaches only its own weights, the two learning
rates are separate, and the copy travels with checkpoints and exports."""

import dataclasses

import pytest
import torch

from sacglam.config import AgentConfig, SACConfig
from sacglam.errors import UserInputError
from sacglam.learner.sac import SACLearner
from sacglam.models import GLAMAgent
from tests.helpers import random_play_buffer


def agent(**changes) -> GLAMAgent:
    torch.manual_seed(0)
    config = {"model": "tiny-causal", "lora_r": 0, "critic_width": 32, "n_critics": 2} | changes
    return GLAMAgent(AgentConfig(**config)).eval()


@pytest.fixture(scope="module")
def batch():
    return random_play_buffer(40).sample(16, n_step=3, mode="ratio")


def outputs(a: GLAMAgent, batch):
    with torch.no_grad():
        return a(a.encode(batch.observations, batch.candidates))


@pytest.mark.parametrize("lora_r,blocks", [(0, 1), (0, 2), (8, 1)])
def test_the_policy_is_the_shared_agents_and_the_critic_starts_as_its_copy(batch, lora_r, blocks):
    shared, own = agent(lora_r=lora_r), agent(lora_r=lora_r, critic_weights="own", critic_blocks=blocks)
    a, b = outputs(shared, batch), outputs(own, batch)
    torch.testing.assert_close(b.log_pi, a.log_pi, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(b.q_critics, a.q_critics, rtol=1e-5, atol=1e-6)


def test_each_loss_reaches_only_its_own_weights(batch):
    own = agent(critic_weights="own")
    out = own(own.encode(batch.observations, batch.candidates))
    names = dict(own.named_parameters())

    def reached(loss):
        grads = torch.autograd.grad(loss, list(names.values()), retain_graph=True, allow_unused=True)
        return {n for n, g in zip(names, grads) if g is not None and g.abs().sum() > 0}

    critic = reached(out.q_critics.sum())
    policy = reached(out.log_pi[out.mask].sum())
    assert critic and all(n.startswith("critic.") for n in critic)
    assert any(n.startswith("critic.tower.") for n in critic)
    assert policy and not any(n.startswith("critic.") for n in policy)


def test_a_lora_critic_trains_its_own_adapter_only():
    own = agent(lora_r=8, critic_weights="own")
    trainable = {n for n, p in own.critic.tower.named_parameters() if p.requires_grad}
    frozen = {n for n, p in own.critic.tower.named_parameters() if not p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    assert frozen and not any("lora_" in n for n in frozen)


@pytest.mark.parametrize("frozen", ["actor", "critic"])
def test_the_actor_and_critic_learning_rates_are_separate(batch, frozen):
    own = agent(critic_weights="own")
    rates = {"actor_lr": 0.0 if frozen == "actor" else 1e-3, "critic_lr": 0.0 if frozen == "critic" else 1e-3}
    sac = SACLearner(own, SACConfig(gamma=0.9, batch_size=16, **rates))
    before = {k: v.clone() for k, v in own.trainable_state_dict().items()}
    for _ in range(2):
        sac.update(batch)
    after = own.trainable_state_dict()
    moved = {k for k in before if not torch.equal(before[k], after[k])}
    critic = {k for k in before if k.startswith("critic.")}
    assert moved == (critic if frozen == "actor" else set(before) - critic)


def test_with_shared_weights_the_actor_rate_also_moves_what_the_critic_reads(batch):
    """The coupling `own` removes: with shared weights the LLM is in the actor's group, so at
    critic_lr 0 the critic's head is frozen and yet Q moves, with the features it reads."""
    shared = agent()
    sac = SACLearner(shared, SACConfig(gamma=0.9, batch_size=16, actor_lr=1e-3, critic_lr=0.0))
    before = {k: v.clone() for k, v in shared.trainable_state_dict().items()}
    sac.update(batch)
    q_before = outputs(agent(), batch).q
    assert not torch.allclose(outputs(shared, batch).q, q_before)  # the critic moved without its own rate
    assert all(torch.equal(before[k], v) for k, v in shared.trainable_state_dict().items() if k.startswith("critic."))


def test_the_critics_copy_travels_with_the_trainable_state(batch):
    own = agent(critic_weights="own")
    sac = SACLearner(own, SACConfig(gamma=0.9, batch_size=16))
    sac.update(batch)
    state = own.trainable_state_dict()
    assert any(k.startswith("critic.tower.") for k in state)
    fresh = agent(critic_weights="own")
    fresh.load_trainable_state_dict(state)
    torch.testing.assert_close(outputs(fresh, batch).q, outputs(own, batch).q)
    with pytest.raises(ValueError, match="missing"):
        agent().load_trainable_state_dict(state)  # a shared-weights agent has no tower to take it


def test_the_target_critic_holds_a_copy_of_the_critics_blocks():
    sac = SACLearner(agent(critic_weights="own"), SACConfig())
    assert any(k.startswith("critic.tower.") for k in sac.target)


def test_an_export_reloads_the_critics_copy(tmp_path, batch):
    from sacglam.config import TrainConfig
    from sacglam.export import export_run, load_run_agent
    from sacglam.pipeline.run import run_pipeline
    from tests.helpers import tiny_pipeline_config

    cfg = tiny_pipeline_config(tmp_path, "own")
    cfg = dataclasses.replace(cfg, agent=dataclasses.replace(cfg.agent, critic_weights="own"))
    assert isinstance(cfg, TrainConfig)
    run_pipeline(cfg)
    export_run(str(cfg.output_dir), tmp_path / "export")
    loaded = GLAMAgent.from_export(str(tmp_path / "export"))
    assert loaded.has_own_critic_weights
    _, trained, _ = load_run_agent(str(cfg.output_dir))  # the run's final checkpoint
    torch.testing.assert_close(outputs(loaded, batch).q_critics, outputs(trained, batch).q_critics)
    torch.testing.assert_close(outputs(loaded, batch).log_pi, outputs(trained, batch).log_pi)


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"critic": "value", "critic_weights": "own"}, "agent.critic='value' is not one"),
        ({"critic_detach": True, "critic_weights": "own"}, "unset critic_detach"),
        ({"critic_blocks": 2}, "needs critic_weights own"),
        ({"critic_blocks": 0, "critic_weights": "own"}, "must be >= 1"),
    ],
)
def test_settings_that_cannot_hold_are_refused_in_one_line(changes, message):
    with pytest.raises(ValueError, match=message):
        AgentConfig(**({"model": "tiny-causal"} | changes))


def test_models_the_copy_cannot_split_are_refused():
    with pytest.raises(UserInputError, match="encoder-decoder"):
        agent(model="tiny-seq2seq", critic_weights="own")
    with pytest.raises(UserInputError, match="has 2 transformer blocks"):
        agent(critic_weights="own", critic_blocks=3)


@pytest.mark.parametrize("lora_r", [0, 8])
def test_after_the_language_warm_start_the_critic_starts_as_the_warm_started_blocks(batch, lora_r):
    from sacglam.config import EnvConfig
    from sacglam.models.warm_start import language_warm_start

    own = agent(lora_r=lora_r, critic_weights="own")
    before = {k: v.clone() for k, v in own.critic.tower.state_dict().items()}
    language_warm_start(own, EnvConfig.variant("simple"), steps=5, seed=0, objective="likelihood")
    top = own.base_model.get_decoder().layers[-1].state_dict()
    after = own.critic.tower.blocks[0].state_dict()
    assert all(torch.equal(after[k], top[k]) for k in top)
    assert any(not torch.equal(before[k], v) for k, v in own.critic.tower.state_dict().items())  # it moved
    shared = agent(lora_r=lora_r)
    language_warm_start(shared, EnvConfig.variant("simple"), steps=5, seed=0, objective="likelihood")
    torch.testing.assert_close(outputs(own, batch).q_critics, outputs(shared, batch).q_critics, rtol=1e-5, atol=1e-6)


def test_a_head_only_warmup_trains_the_critics_own_blocks_and_leaves_pi(batch):
    own = agent(critic_weights="own")
    sac = SACLearner(own, SACConfig(gamma=0.9, batch_size=16, critic_warmup_updates=2, warmup_head_only=True))
    before = {k: v.clone() for k, v in own.trainable_state_dict().items()}
    for _ in range(2):
        assert sac.update(batch)["warmup"] == 1.0
    moved = {k for k, v in own.trainable_state_dict().items() if not torch.equal(before[k], v)}
    assert any(k.startswith("critic.tower.") for k in moved)
    assert all(k.startswith("critic.") for k in moved)  # pi exactly as it was
