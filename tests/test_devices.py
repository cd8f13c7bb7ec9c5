"""Nothing on a device crosses an actor: the learners' checkpoint state and weights hold CPU
tensors only, checked with a stand-in for GPU tensors (`tests.helpers.OnDevice`), and a component
about to return one fails in one line naming where it is."""

import numpy as np
import pytest
import torch

from sacglam.config import AgentConfig, PPOConfig, SACConfig
from sacglam.learner.ppo import PPOLearner
from sacglam.learner.sac import SACLearner
from sacglam.models import GLAMAgent
from sacglam.runtime.devices import DeviceCrossingError, check_on_host, off_host, to_host
from tests.helpers import OnDevice, random_play_buffer


def test_the_stand_in_reports_a_device_and_copies_to_the_host():
    x = OnDevice.of(torch.ones(3))
    assert (x * 2).detach().device == torch.device("cuda", 0)
    assert type(x.to("cpu")) is torch.Tensor and x.cpu().device.type == "cpu"


def test_a_planted_device_tensor_is_found_and_named():
    value = {"agent": {"w": torch.ones(2)}, "optimizer": {"state": {0: {"exp_avg": OnDevice.of(torch.ones(2))}}}}
    assert off_host(value, "state") == ["state['optimizer']['state'][0]['exp_avg'] (cuda:0)"]
    with pytest.raises(DeviceCrossingError, match=r"the checkpoint would leave its actor .*\['exp_avg'\] \(cuda:0\)"):
        check_on_host(value, "the checkpoint")
    moved = to_host(value)
    assert off_host(moved) == [] and moved["agent"]["w"] is value["agent"]["w"]  # CPU tensors are kept


def _on_device(optimizer: torch.optim.Optimizer) -> None:
    """Make an optimizer's state look like a GPU learner's."""
    for state in optimizer.state.values():
        for key, tensor in state.items():
            if isinstance(tensor, torch.Tensor) and key != "step":
                state[key] = OnDevice.of(tensor)


def test_a_sac_learners_checkpoint_state_holds_cpu_tensors_only():
    torch.manual_seed(0)
    agent = GLAMAgent(AgentConfig(model="tiny-causal", lora_r=0, critic_width=16)).eval()
    sac = SACLearner(agent, SACConfig(gamma=0.9, batch_size=16))
    sac.update(random_play_buffer(30).sample(16, mode="ratio"))
    _on_device(sac.optimizer)
    _on_device(sac.alpha_optimizer)
    sac.target = {k: OnDevice.of(v) for k, v in sac.target.items()}
    with pytest.raises(DeviceCrossingError):  # what the optimizer itself gives would cross
        check_on_host(sac.optimizer.state_dict(), "Adam's state")
    check_on_host(sac.state_dict(), "the SAC learner's state")


def test_a_ppo_learners_checkpoint_state_holds_cpu_tensors_only():
    from sacglam.config import EnvConfig
    from sacglam.learner.ppo_rollout import rollout_from_segments
    from sacglam.rollout_workers.worker import RolloutWorker

    torch.manual_seed(0)
    agent = GLAMAgent(AgentConfig(model="tiny-causal", lora_r=0, critic="value", critic_width=16)).eval()
    config = PPOConfig(rollout_steps=32, epochs=1, minibatch_size=16)
    ppo = PPOLearner(agent, config, seed=0)
    segments = RolloutWorker(EnvConfig.variant("simple"), 4, seed=0).collect(8, None).episodes
    rollout, _ = rollout_from_segments(agent, segments, config, np.random.default_rng(0))
    ppo.update(rollout)
    _on_device(ppo.optimizer)
    check_on_host(ppo.state_dict(), "the PPO learner's state")


def test_a_learner_service_refuses_to_return_device_tensors(monkeypatch):
    from sacglam.learner.service import LearnerService

    service = LearnerService.__new__(LearnerService)
    service.training = type("T", (), {"state_dict": lambda self: {"optimizer": OnDevice.of(torch.ones(1))}})()
    with pytest.raises(DeviceCrossingError, match="the learner's checkpoint state would leave its actor"):
        service.state_dict()
