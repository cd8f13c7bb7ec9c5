"""LLM agents: model loading (offline), shared-prefix action scoring, critic heads, LoRA/4-bit."""

import logging
import warnings

# bitsandbytes' CPU backend tries to fetch an optional 4-bit kernel from the Hugging Face hub
# (never reachable offline) and warns at import; its built-in CPU path is what runs instead.
logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
# transformers 5 warns about its own renamed attribute inside `from_pretrained`; not ours to fix.
warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)

from sacglam.models.agent import GLAMAgent  # noqa: E402
from sacglam.models.loading import LanguageModel, ModelNotFoundError, available_models, load_language_model  # noqa: E402

__all__ = ["GLAMAgent", "LanguageModel", "ModelNotFoundError", "available_models", "load_language_model"]
