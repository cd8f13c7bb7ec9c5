"""The LLM agent as a policy: greedy takes the argmax, sampling follows pi and is seeded."""

import json

import torch

from sacglam.cli import main
from sacglam.config import AgentConfig
from sacglam.envs import PlaygroundTextVector
from sacglam.models import GLAMAgent
from sacglam.models.policy import LLMPolicy


def agent_and_states(n=4):
    agent = GLAMAgent(AgentConfig(model="tiny-causal", lora_r=16, critic="none", scoring="mean"))
    vec = PlaygroundTextVector(n)
    obs, info = vec.reset(seed=5)
    return agent, obs, info["candidates"]


def test_greedy_policy_takes_the_most_probable_candidate():
    agent, obs, candidates = agent_and_states()
    probs = agent(agent.encode(obs, candidates)).probs
    picks = LLMPolicy(agent, greedy=True).act(obs, candidates)
    assert picks == [c[i] for c, i in zip(candidates, probs.argmax(-1).tolist())]


def test_sampled_policy_follows_pi_and_is_reproducible():
    agent, obs, candidates = agent_and_states(n=1)
    probs = agent(agent.encode(obs, candidates)).probs[0]
    policy = LLMPolicy(agent, seed=1)
    draws = [policy.act(obs, candidates)[0] for _ in range(3000)]
    frequencies = torch.tensor([draws.count(c) / len(draws) for c in candidates[0]])
    assert (frequencies - probs.detach()).abs().max() < 0.04
    assert LLMPolicy(agent, seed=2).act(obs * 5, candidates * 5) == LLMPolicy(agent, seed=2).act(
        obs * 5, candidates * 5
    )


def test_evaluate_command_runs_the_llm_policies(tmp_path):
    out = tmp_path / "eval.json"
    main(
        [
            "evaluate",
            "--variants",
            "simple",
            "--episodes",
            "6",
            "--policies",
            "llm-sampled",
            "llm-greedy",
            "--agent.model",
            "tiny-causal",
            "--agent.critic-width",
            "16",
            "--no-progress",
            "--output",
            str(out),
        ]
    )
    report = json.loads(out.read_text())
    assert {r["policy"] for r in report["results"]} == {"llm-sampled", "llm-greedy"}
    assert report["config"]["agent"]["model"] == "tiny-causal"
    assert all(r["success_by_goal_type"]["all"]["episodes"] == 6 for r in report["results"])
