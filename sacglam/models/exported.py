"""An agent back from an export folder (`sacglam export`): `GLAMAgent.from_export(directory)`.

The folder's `sacglam.json` holds the agent's settings; its weights are either a whole model
(`model/`, a run that trained every weight: loaded with `from_pretrained` and used as the agent's
language model) or a PEFT adapter (`adapter/`: the base model is loaded by its name, as the run
loaded it, and the adapter's tensors go into the agent's LoRA layers); the critic head and its
input statistics come from `critic.safetensors`. Every tensor the export holds must land in the
agent, and every trained tensor of the agent must come from the export: a mismatch is an error
naming the keys, never a silently half-loaded agent.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sacglam.errors import UserInputError

if TYPE_CHECKING:
    from torch import nn

    from sacglam.config import AgentConfig
    from sacglam.models.loading import LanguageModel

SETTINGS_FILE = "sacglam.json"


class ExportFolderError(UserInputError, ValueError):
    """A folder that is not a complete `sacglam export`."""


def is_export(directory: str | Path) -> bool:
    """Whether `directory` (a local path) is a `sacglam export` folder: its `sacglam.json`, and no
    run's `config.json` (a run directory that also holds an export is read as the run: its newest
    checkpoint, not a possibly older export)."""
    folder = Path(str(directory))
    return "://" not in str(directory) and (folder / SETTINGS_FILE).is_file() and not (folder / "config.json").exists()


def export_settings(directory: str | Path) -> dict[str, Any]:
    """The export's `sacglam.json`, checked to name its weights folder and to have it."""
    path = Path(directory) / SETTINGS_FILE
    try:
        settings = json.loads(path.read_text())
    except FileNotFoundError:
        raise ExportFolderError(
            f"{directory} has no {SETTINGS_FILE}: give a folder written by `sacglam export`"
        ) from None
    except (OSError, json.JSONDecodeError) as error:
        raise ExportFolderError(f"cannot read {path} ({error}): export the run again with `sacglam export`") from None
    needed = {"weights": str, "agent": dict, "base_model": dict, "env_steps": int, "last_evaluation": dict}
    wrong = [k for k, kind in needed.items() if not isinstance(settings, dict) or not isinstance(settings.get(k), kind)]
    if wrong:
        raise ExportFolderError(
            f"{path} lacks {', '.join(wrong)} (not written by this version of `sacglam export`): export the run again"
        )
    weights = Path(directory) / settings["weights"]
    if settings["weights"] not in ("adapter", "model") or not weights.is_dir():
        raise ExportFolderError(
            f"{directory} lacks its weights folder ({settings.get('weights')!r} named in {SETTINGS_FILE}): "
            "export the run again with `sacglam export`"
        )
    return settings


class ExportTarget(Protocol):
    """What the export's weights load into: the agent's LLM (with its LoRA layers) and critic."""

    llm: nn.Module
    critic: nn.Module | None


def exported_agent_parts(
    directory: str | Path, **agent_changes: Any
) -> tuple[AgentConfig, LanguageModel | None, dict[str, Any]]:
    """The agent settings of an export, its language model when the export holds a whole model
    (None: the base named in the settings, with an adapter to load), and its `sacglam.json`.
    `agent_changes` replace agent settings that do not change the weights (`device`, `dtype`,
    `compile`); by default the agent runs on CPU in float32, the export's own precision."""
    import torch

    from sacglam.config import AgentConfig
    from sacglam.config_io import from_dict
    from sacglam.models.loading import LanguageModel

    directory = Path(directory)
    settings = export_settings(directory)
    agent_fields = {f.name for f in dataclasses.fields(AgentConfig)}
    saved = {k: v for k, v in settings["agent"].items() if k in agent_fields}
    config = from_dict(AgentConfig, saved, where=str(directory / SETTINGS_FILE))
    changes: dict[str, Any] = {"device": "cpu", "dtype": "float32", "compile": False, "load_in_4bit": False}
    changes |= agent_changes
    config = dataclasses.replace(config, **changes)
    weights = directory / settings["weights"]
    language_model = None
    if settings["weights"] == "model":
        from transformers.models.auto import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

        kind = settings["base_model"].get("kind")
        auto = AutoModelForSeq2SeqLM if kind == "seq2seq" else AutoModelForCausalLM
        try:
            loaded: Any = auto.from_pretrained(
                weights, dtype=getattr(torch, config.resolved_dtype), output_loading_info=True
            )
            model, info = loaded  # (model, loading info): with output_loading_info
            tokenizer = AutoTokenizer.from_pretrained(weights)
        except Exception as error:  # a missing or damaged file, in whatever way transformers or safetensors says it
            raise ExportFolderError(
                f"cannot load {weights} ({type(error).__name__}: {' '.join(str(error).split())[:200]}): a file is "
                "missing or damaged; export the run again with `sacglam export`"
            ) from error
        wrong_keys = {k: v for k, v in info.items() if k != "error_msgs" and v}
        if wrong_keys or info.get("error_msgs"):
            raise ExportFolderError(f"{weights} does not fit its model: {wrong_keys or info['error_msgs']}")
        language_model = LanguageModel(model.to(config.resolved_device), tokenizer, kind, config.model)
    return config, language_model, settings


def load_export_weights(agent: ExportTarget, directory: str | Path, settings: dict[str, Any]) -> None:
    """The export's adapter (when it holds one) and critic into an agent built from
    `exported_agent_parts`; every tensor must land, or ExportFolderError names the keys."""
    directory = Path(directory)
    if settings["weights"] == "adapter":
        _load_adapter(agent, directory / settings["weights"] / "adapter_model.safetensors")
    critic_file = directory / "critic.safetensors"
    if agent.critic is not None:
        if not critic_file.is_file():
            raise ExportFolderError(f"{directory} has no critic.safetensors, which its agent settings need")
        missing, unexpected = agent.critic.load_state_dict(_read_tensors(critic_file), strict=False)
        if missing or unexpected:
            raise ExportFolderError(f"{critic_file} does not fit the agent: missing {missing}, unexpected {unexpected}")


def _read_tensors(path: Path) -> dict[str, Any]:
    """A safetensors file's tensors; ExportFolderError (one line) when it is damaged or truncated."""
    from safetensors.torch import load_file

    try:
        return load_file(path)
    except Exception as error:  # safetensors' own SafetensorError, or an OSError
        raise ExportFolderError(
            f"cannot read {path} ({type(error).__name__}: {' '.join(str(error).split())[:200]}): it is damaged or "
            "truncated; export the run again with `sacglam export`"
        ) from error


def _load_adapter(agent: ExportTarget, path: Path) -> None:
    """The adapter's tensors into the agent's LoRA layers, every one of them."""
    from peft import set_peft_model_state_dict

    if not path.is_file():
        raise ExportFolderError(f"{path} is missing: export the run again with `sacglam export`")
    result = set_peft_model_state_dict(agent.llm, _read_tensors(path))
    lora = [name for name, p in agent.llm.named_parameters() if "lora_" in name and p.requires_grad]
    unexpected = list(getattr(result, "unexpected_keys", []))
    missing = [k for k in getattr(result, "missing_keys", []) if "lora_" in k]
    if unexpected or missing or not lora:
        raise ExportFolderError(
            f"{path} does not fit the agent's LoRA layers: unexpected {unexpected[:5]}, missing {missing[:5]}"
        )
