"""LLM agents: model loading (offline), shared-prefix action scoring, critic heads, LoRA/4-bit."""

import logging

# bitsandbytes' CPU backend tries to fetch an optional 4-bit kernel from the Hugging Face hub
# (never reachable offline) and warns at import; its built-in CPU path is what runs instead.
logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)

from sacglam.models.agent import GLAMAgent  # noqa: E402
from sacglam.models.loading import LanguageModel, ModelNotFoundError, available_models, load_language_model  # noqa: E402

__all__ = ["GLAMAgent", "LanguageModel", "ModelNotFoundError", "available_models", "load_language_model"]
