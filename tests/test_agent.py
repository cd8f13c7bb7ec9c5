"""The LLM agent on tiny causal and seq2seq models: shared-prefix equals naive scoring, the policy
is a proper distribution, gradients go where they should, and the trainable state round-trips."""

import pytest
import torch

from sacglam.config import AgentConfig
from sacglam.envs import PlaygroundTextVector
from sacglam.models import GLAMAgent, ModelNotFoundError, load_language_model
from sacglam.models.agent import candidate_prompt
from sacglam.models.encoding import token_ids
from sacglam.models.scoring import naive_score

MODELS = ["tiny-causal", "tiny-seq2seq"]


def states(n=6, seed=0):
    """Real Playground-Text states with varying candidate counts (holding an object removes one)."""
    vec = PlaygroundTextVector(n)
    obs, info = vec.reset(seed=seed)
    obs, _, _, _, info = vec.step([c[i % (len(c) - 2)] for i, c in enumerate(info["candidates"])])
    # grasp in every other environment, so that candidate lists differ in length
    obs, _, _, _, info = vec.step(["Grasp" if i % 2 else "Release" for i in range(n)])
    return obs, info["candidates"]


def make_agent(model, **kwargs):
    torch.manual_seed(0)
    return GLAMAgent(AgentConfig(**({"model": model, "lora_r": 16, "critic_width": 32} | kwargs)))


def naive(agent, observations, candidates):
    prompts = agent.prompts(observations, candidates)
    return naive_score(
        agent.kind,
        agent.base_model,
        agent.tokenizer,
        prompts,
        candidates,
        agent.end_token_id,
        agent.config.critic_input,
    )


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("template", ["plain", "candidates"])
@pytest.mark.parametrize("end_of_action, critic_input", [(True, "last"), (False, "last"), (True, "mean")])
def test_shared_prefix_equals_naive_scoring(model, template, end_of_action, critic_input):
    agent = make_agent(model, prompt_template=template, end_of_action=end_of_action, critic_input=critic_input)
    observations, candidates = states()
    assert len({len(c) for c in candidates}) > 1, "the batch should mix candidate counts"
    batch = agent.encode(observations, candidates)
    fast, slow = agent.candidate_scores(batch), naive(agent, observations, candidates)
    torch.testing.assert_close(fast.log_likelihood, slow.log_likelihood, atol=1e-5, rtol=0)
    torch.testing.assert_close(fast.candidate_features, slow.candidate_features, atol=1e-5, rtol=0)
    torch.testing.assert_close(fast.prompt_features, slow.prompt_features, atol=1e-5, rtol=0)
    out, naive_out = agent(batch), agent.outputs_from_scores(batch, slow)
    torch.testing.assert_close(out.log_pi, naive_out.log_pi, atol=1e-5, rtol=0)
    torch.testing.assert_close(out.q, naive_out.q, atol=1e-5, rtol=0)


# Actions that differ only in their last token (single-token actions: their only token).
LAST_TOKEN_PAIRS = [("Grasp", "Release"), ("Go to red cat", "Go to red dog"), ("Go to blue rose", "Go to blue tree")]


@pytest.mark.parametrize("model", MODELS)
def test_q_and_critic_feature_change_when_only_the_last_token_of_an_action_changes(model):
    agent = make_agent(model, n_critics=2)
    observations, _ = states(n=1)
    candidates = [[a for pair in LAST_TOKEN_PAIRS for a in pair]]
    batch = agent.encode(observations, candidates)
    with torch.no_grad():
        scores, out = agent.candidate_scores(batch), agent(batch)
    for k in range(len(LAST_TOKEN_PAIRS)):
        a, b = 2 * k, 2 * k + 1
        assert (scores.candidate_features[a] - scores.candidate_features[b]).abs().max() > 1e-3, LAST_TOKEN_PAIRS[k]
        assert (out.q_critics[:, 0, a] - out.q_critics[:, 0, b]).abs().min() > 1e-6, LAST_TOKEN_PAIRS[k]


def independent_per_candidate_q(agent, observations, candidates):
    """Q(s, a) for every candidate, each from its own unpadded forward through the transformers
    model (no sacglam encoding or scoring code): the hidden state after the action's last token
    (the tokenizer's end-of-sequence token with `end_of_action`), each critic MLP on it, the minimum
    over critics. Returns a list of per-state lists."""
    model, tok = agent.base_model, agent.tokenizer
    end = [tok.eos_token_id] if agent.config.scores_end_of_action else []
    per_state = []
    for prompt, cs in zip(agent.prompts(observations, candidates), candidates):
        prompt_ids = tok(prompt)["input_ids"]
        qs = []
        for action in cs:
            if agent.kind == "causal":
                ids = torch.tensor([prompt_ids + tok(" " + action, add_special_tokens=False)["input_ids"] + end])
                feature = model.get_decoder()(input_ids=ids).last_hidden_state[0, -1]
            else:
                action_ids = tok(action, add_special_tokens=False)["input_ids"] + end
                decoder_ids = torch.tensor([[model.config.decoder_start_token_id] + action_ids])
                out = model(
                    input_ids=torch.tensor([prompt_ids]), decoder_input_ids=decoder_ids, output_hidden_states=True
                )
                feature = out.decoder_hidden_states[-1][0, -1]
            qs.append(min(float(net(feature)) for net in agent.critic.nets))
        per_state.append(qs)
    return per_state


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("end_of_action", [True, False])
def test_shared_prefix_q_equals_an_independent_per_candidate_forward(model, end_of_action):
    agent = make_agent(model, n_critics=2, end_of_action=end_of_action)
    observations, candidates = states()
    with torch.no_grad():
        out = agent(agent.encode(observations, candidates))
        expected = independent_per_candidate_q(agent, observations, candidates)
    for b, qs in enumerate(expected):
        torch.testing.assert_close(out.q[b, : len(qs)], torch.tensor(qs), atol=1e-5, rtol=0)


def test_boolean_sdpa_mask_equals_the_additive_eager_mask_in_values_and_gradients():
    from sacglam.models.scoring import packed_attention_mask

    agent = make_agent("tiny-causal")
    observations, candidates = states()
    batch = agent.encode(observations, candidates)
    results = {}
    for implementation in ("sdpa", "eager"):
        agent.base_model.set_attn_implementation(implementation)
        mask = packed_attention_mask(agent.base_model, batch.attention_allowed)
        assert mask.dtype == (torch.bool if implementation == "sdpa" else torch.float32)
        agent.zero_grad(set_to_none=True)
        out = agent(batch)
        (out.log_pi[out.mask].sum() + out.q[out.mask].sum()).backward()
        grads = [p.grad.clone() for p in agent.parameters() if p.requires_grad and p.grad is not None]
        results[implementation] = (out.log_pi.detach(), out.q.detach(), grads)
    (pi_s, q_s, g_s), (pi_e, q_e, g_e) = results["sdpa"], results["eager"]
    torch.testing.assert_close(pi_s, pi_e, atol=1e-5, rtol=0)
    torch.testing.assert_close(q_s, q_e, atol=1e-5, rtol=0)
    assert len(g_s) == len(g_e) > 0
    for a, b in zip(g_s, g_e):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("model", MODELS)
def test_policy_is_a_softmax_over_each_states_own_candidates(model):
    agent = make_agent(model)
    observations, candidates = states()
    out = agent(agent.encode(observations, candidates))
    counts = torch.tensor([len(c) for c in candidates])
    assert out.mask.sum(-1).tolist() == counts.tolist()
    torch.testing.assert_close(out.probs.sum(-1), torch.ones(len(candidates)))
    assert torch.isinf(out.log_pi[~out.mask]).all() and (out.q[~out.mask] == 0).all()
    # eq. 2: the softmax of eq. 1's sums over the valid candidates
    for b, n in enumerate(counts.tolist()):
        torch.testing.assert_close(out.log_pi[b, :n], out.action_log_likelihood[b, :n].log_softmax(-1))


def test_mean_scoring_divides_by_action_length():
    observations, candidates = states(n=2)
    total, mean = make_agent("tiny-causal"), make_agent("tiny-causal", scoring="mean")
    batch = total.encode(observations, candidates)
    lengths = torch.zeros_like(total(batch).action_log_likelihood).index_put(
        (batch.index.state, batch.index.slot), batch.index.lengths.float()
    )
    out_total, out_mean = total(batch), mean(batch)
    m = out_total.mask
    torch.testing.assert_close(out_mean.action_log_likelihood[m], out_total.action_log_likelihood[m] / lengths[m])


def test_candidate_prompt_lists_the_actions_before_action():
    obs, candidates = states(n=1)
    text = candidate_prompt(obs[0], candidates[0])
    assert text.endswith(f"\nPossible actions: {', '.join(candidates[0])}\nAction:")
    assert text.startswith(obs[0][: -len("Action:")])


def test_candidate_prompt_keeps_every_line_an_environment_wrote():
    """Only a final line ending in a colon is a cue to put the list above; anything else stays."""
    assert candidate_prompt("Goal: grasp cat\nYour move:", ["a", "b"]) == (
        "Goal: grasp cat\nPossible actions: a, b\nYour move:"
    )
    for observation in ("Goal: grasp cat\nWhat do you do?", "Goal: grasp cat Action:"):
        assert candidate_prompt(observation, ["a", "b"]) == f"{observation}\nPossible actions: a, b\nAction:"
    # trailing whitespace (a newline after the cue, a space after it) does not hide the cue
    for observation in ("Goal: grasp cat\nAction:\n", "Goal: grasp cat\nAction: "):
        assert candidate_prompt(observation, ["a"]) == "Goal: grasp cat\nPossible actions: a\nAction:"


def grads_after(agent, loss_fn):
    agent.zero_grad(set_to_none=True)
    observations, candidates = states(n=3)
    loss_fn(agent(agent.encode(observations, candidates))).backward()
    lora = [p for n, p in agent.named_parameters() if "lora_" in n]
    head = list(agent.critic.parameters())
    base = [p for n, p in agent.llm.named_parameters() if "lora_" not in n]
    assert lora and head and base
    moved = lambda ps: any(p.grad is not None and p.grad.abs().sum() > 0 for p in ps)  # noqa: E731
    return moved(lora), moved(head), all(p.grad is None for p in base), all(not p.requires_grad for p in base)


def policy_loss(out):
    return -(out.log_pi.masked_fill(~out.mask, 0) * out.probs.detach()).sum()


def critic_loss(out):
    return (out.q**2).sum()


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("critic", ["action", "observation"])
def test_gradients_reach_lora_and_head_and_never_the_frozen_base(model, critic):
    agent = make_agent(model, critic=critic)
    lora, head, base_untouched, base_frozen = grads_after(agent, policy_loss)
    assert lora and not head and base_untouched and base_frozen
    lora, head, base_untouched, _ = grads_after(agent, critic_loss)
    assert lora and head and base_untouched


@pytest.mark.parametrize("model", MODELS)
def test_detached_critic_trains_only_its_head(model):
    agent = make_agent(model, critic_detach=True)
    lora, head, base_untouched, _ = grads_after(agent, critic_loss)
    assert head and not lora and base_untouched


@pytest.mark.parametrize("model", MODELS)
def test_trainable_state_round_trips_exactly(model):
    source, target = make_agent(model), make_agent(model)
    with torch.no_grad():
        for p in source.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p))
    state = source.trainable_state_dict()
    assert any("lora_" in k for k in state) and any(k.startswith("critic.") for k in state)
    assert all(v.device.type == "cpu" for v in state.values())
    target.load_trainable_state_dict(state)
    assert all(torch.equal(state[k], v) for k, v in target.trainable_state_dict().items())
    observations, candidates = states(n=2)
    batch = source.encode(observations, candidates)
    assert torch.equal(source(batch).log_pi, target(batch).log_pi)
    small = sum(v.numel() for v in state.values())
    assert small < sum(p.numel() for p in source.parameters())


def test_loading_a_trainable_state_of_another_shape_fails_clearly_and_changes_nothing():
    agent = make_agent("tiny-causal")
    before = agent.trainable_state_dict()
    other = make_agent("tiny-causal", critic="observation").trainable_state_dict()
    with torch.no_grad():
        for v in other.values():
            v.add_(1.0)
    with pytest.raises(ValueError, match="does not fit this agent.*shape"):
        agent.load_trainable_state_dict(other)
    assert all(torch.equal(before[k], v) for k, v in agent.trainable_state_dict().items())
    with pytest.raises(ValueError, match="does not fit this agent.*missing"):
        agent.load_trainable_state_dict(make_agent("tiny-causal", critic="none").trainable_state_dict())


def test_full_finetuning_without_lora_trains_every_weight():
    agent = make_agent("tiny-causal", lora_r=0)
    assert all(p.requires_grad for p in agent.parameters())
    assert set(agent.trainable_state_dict()) == {n for n, _ in agent.named_parameters()}


@pytest.mark.parametrize("model", MODELS)
def test_4bit_base_scores_close_to_fp32_and_trains_lora(model):
    agent = make_agent(model, load_in_4bit=True)
    assert any(type(m).__name__ == "Linear4bit" for m in agent.modules())
    observations, candidates = states(n=2)
    out = agent(agent.encode(observations, candidates))
    torch.testing.assert_close(out.probs.sum(-1), torch.ones(2))
    lora, head, base_untouched, _ = grads_after(agent, critic_loss)
    assert lora and head and base_untouched


def test_unknown_model_lists_the_available_ones():
    with pytest.raises(ModelNotFoundError, match="smollm2-135m.*tiny-causal"):
        load_language_model("/no/such/model-dir")


def test_4bit_without_lora_is_rejected():
    with pytest.raises(ValueError, match="needs LoRA"):
        AgentConfig(load_in_4bit=True, lora_r=0)


@pytest.mark.parametrize("model", MODELS)
def test_a_local_model_directory_loads_like_a_built_in_one(model, tmp_path):
    built_in = load_language_model(model)
    built_in.model.save_pretrained(tmp_path)
    built_in.tokenizer.save_pretrained(tmp_path)
    local = load_language_model(str(tmp_path))
    assert local.kind == built_in.kind
    observations, candidates = states(n=2)
    a = GLAMAgent(AgentConfig(model=model, lora_r=16, critic="none"), language_model=built_in)
    b = GLAMAgent(AgentConfig(model=str(tmp_path), lora_r=16, critic="none"), language_model=local)
    batch = a.encode(observations, candidates)
    assert torch.equal(a(batch).log_pi, b(batch).log_pi)


@pytest.mark.parametrize("critic", ["action", "observation"])
def test_twin_critics_are_independent_heads_and_q_is_their_minimum(critic):
    agent = make_agent("tiny-causal", critic=critic, n_critics=2)
    observations, candidates = states(n=3)
    out = agent(agent.encode(observations, candidates))
    assert out.q_critics.shape == (2, *out.mask.shape)
    assert not torch.equal(out.q_critics[0], out.q_critics[1])
    torch.testing.assert_close(out.q, out.q_critics.min(0).values)
    agent.zero_grad(set_to_none=True)
    out.q_critics.sum().backward()
    assert all(p.grad is not None for p in agent.critic.parameters())


@pytest.mark.parametrize("name", ["tiny-causal", "tiny-seq2seq"])
def test_backend_token_ids_equal_the_transformers_call(name):
    tokenizer = load_language_model(name).tokenizer
    vector = PlaygroundTextVector(4, n_objects=6, goals="train", max_steps=30)
    observations, infos = vector.reset(seed=3)
    texts = [candidate_prompt(o, c) for o, c in zip(observations, infos["candidates"])]
    texts += ["Goal: grasp\n\n  two  spaces,\tand a tab; unknown-wörds 123", "x"]
    for special in (True, False):
        assert token_ids(tokenizer, texts, special) == tokenizer(texts, add_special_tokens=special)["input_ids"]


def test_backend_token_ids_defer_to_the_transformers_call_when_the_backend_truncates():
    tokenizer = load_language_model("tiny-causal").tokenizer
    tokenizer.backend_tokenizer.enable_truncation(max_length=3)  # a state a plain call would not use
    try:
        assert [len(ids) for ids in token_ids(tokenizer, ["a b c d e f", "a"])] == [6, 1]
    finally:
        tokenizer.backend_tokenizer.no_truncation()
