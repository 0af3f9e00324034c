"""Defaults as transformers fills them: every config.json key deleted in turn, for one model of each family.

A config found in the wild often lacks keys its author left to the library's defaults. For each family
(one tiny random model of ``test_checkpoints.MODELS``, with its window where it has one), each key of the
saved ``config.json`` is deleted in turn and the folder loaded by both sides from that reduced config:

- transformers refuses it (its config does not build, or the weights do not fit it: missing or
  mismatched tensors) -> the project must refuse it too (a one-line CheckpointError);
- transformers loads it -> the project must load it and compute the same hidden states and logits
  (float32, relative error < 1e-4 as in test_checkpoints) at 40 tokens, past every window of 16;
  a project refusal is accepted only for a key it requires by name (the message names the key).

Forward passes are run only where a side's reading changed: transformers' config (``to_dict``) and the
project's ``TransformerConfig`` are compared with the full config's first, and where neither changed the
outputs are the full config's, already compared.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from families import FAMILIES  # noqa: E402
from test_checkpoints import REPRESENTATIVE, TOLERANCE, _build, _errors, _reference  # noqa: E402

import nohair_jax as nh  # noqa: E402
from nohair_jax.checkpoints import load_model  # noqa: E402  (the tokenizer-less folders' warning is tested elsewhere)
from nohair_jax.checkpoints.build import checked_config  # noqa: E402
from nohair_jax.metadata import CheckpointError  # noqa: E402

# One model per family (model_type), each with the features its defaults decide (windows, soft caps).
FAMILY_MODELS = [REPRESENTATIVE.get(family, family) for family in FAMILIES]
LENGTH = 40  # past the test models' windows of 16
# Ids of special tokens enter no forward pass; transformers' defaults for them (Phi-3's pad id 32000) can fall
# outside a tiny vocabulary, where it refuses to build the embedding: not a reading the project must share.
SPECIAL_TOKENS = ("pad_token_id", "bos_token_id", "eos_token_id")


def _theirs_config(folder):
    """transformers' config of the folder as a dict, or None where it refuses to build one."""
    try:
        config = transformers.AutoConfig.from_pretrained(folder)
    except Exception:  # noqa: BLE001  any refusal of transformers' counts as one
        return None
    return {k: v for k, v in config.to_dict().items() if k != "transformers_version"}


def _theirs_model(folder):
    """transformers' model of the folder in float32, or None where the weights do not fit its config."""
    try:
        model, info = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                                        output_loading_info=True)
    except Exception:  # noqa: BLE001
        return None
    if info["missing_keys"] or info["mismatched_keys"] or info["unexpected_keys"]:
        return None
    model.config.use_cache = False  # its cache refuses a window layer whose window is null; the forward pass does not
    return model.eval()


def _ours_config(folder):
    """The project's TransformerConfig of the folder, or the CheckpointError refusing it."""
    try:
        return checked_config(json.loads((folder / "config.json").read_text()), "config.json", "float32", None)[0]
    except CheckpointError as err:
        return err


def _ours_model(folder):
    """The project's model of the folder in float32, or the CheckpointError refusing it."""
    try:
        return load_model(folder, dtype="float32")
    except CheckpointError as err:
        return err


@pytest.mark.parametrize("name", FAMILY_MODELS)
def test_each_deleted_config_key_is_read_as_transformers_reads_it(name, tmp_path):
    model = _build(name)
    model.save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    full = json.loads(path.read_text())
    tokens = np.random.default_rng(0).integers(0, full["vocab_size"], (1, LENGTH))
    full_theirs, full_ours = _theirs_config(tmp_path), _ours_config(tmp_path)
    assert max(_errors(load_model(tmp_path, dtype="float32"), _reference(model, tokens), tokens).values()) < TOLERANCE

    disagreements, forwards = [], 0
    for key in sorted(full):
        path.write_text(json.dumps({k: v for k, v in full.items() if k != key}))
        theirs_config, ours_config = _theirs_config(tmp_path), _ours_config(tmp_path)
        if theirs_config == full_theirs and ours_config == full_ours:
            continue  # neither side reads the key differently without it: the full config's outputs
        theirs, ours = theirs_config and _theirs_model(tmp_path), _ours_model(tmp_path)
        if theirs is None:
            if not isinstance(ours, CheckpointError) and key not in SPECIAL_TOKENS:
                disagreements.append(f"{key}: transformers refuses the config without it, the project loads it")
            continue
        forwards += 1
        try:
            reference = _reference(theirs, tokens)
        except Exception as err:  # noqa: BLE001  transformers builds the model but cannot run it
            if not isinstance(ours, CheckpointError):
                disagreements.append(f"{key}: transformers fails on the config without it ({err}), the project loads it")
            continue
        if isinstance(ours, CheckpointError):
            if repr(key) not in str(ours):
                disagreements.append(f"{key}: transformers loads the config without it, the project refuses: {ours}")
            continue
        errors = _errors(ours, reference, tokens)
        if max(errors.values()) >= TOLERANCE:
            worst = max(errors, key=errors.get)
            disagreements.append(f"{key}: {worst} differs by {errors[worst]:.2g} relative")
    print(name, f"{len(full)} keys, {forwards} compared by their outputs")
    assert not disagreements, "\n".join(disagreements)


@pytest.mark.parametrize("layer_types, message", [
    (["sliding_attention", "full_attention"], "layer_types has 2 entries for num_hidden_layers=3"),
    (["sliding_attention", "full_attention", "chunked_attention"], "layer_types has unknown kind 'chunked_attention'"),
])
def test_layer_types_of_the_wrong_length_or_kind_are_refused(tmp_path, layer_types, message):
    _build("gemma2").save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(dict(config, layer_types=layer_types)))
    with pytest.raises(CheckpointError, match=message):
        load_model(tmp_path)


def test_rope_scaling_beside_a_default_rope_parameters_is_read_first(tmp_path):
    """Many published configs carry a default ``rope_parameters`` beside the ``rope_scaling`` that matters;
    transformers reads ``rope_scaling`` first (``convert_rope_params_to_dict``)."""
    _build("llama_gqa").save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["rope_parameters"]["rope_type"] == "default"
    (tmp_path / "config.json").write_text(json.dumps(dict(config, rope_scaling=dict(rope_type="linear", factor=4.0))))
    theirs = transformers.AutoConfig.from_pretrained(tmp_path).rope_parameters
    assert (theirs["rope_type"], theirs["factor"]) == ("linear", 4.0)
    assert load_model(tmp_path).config.rope_scaling == nh.RopeScaling("linear", 4.0)
