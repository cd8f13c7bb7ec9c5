"""LLM agents: model loading (offline), shared-prefix action scoring, critic heads, LoRA/4-bit."""

from sacglam.models.agent import GLAMAgent
from sacglam.models.loading import LanguageModel, ModelNotFoundError, available_models, load_language_model

__all__ = ["GLAMAgent", "LanguageModel", "ModelNotFoundError", "available_models", "load_language_model"]
