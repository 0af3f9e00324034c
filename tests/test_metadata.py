"""Checkpoint metadata of every type and value, thrown at the loaders (``nohair_jax.metadata``).

Property: whatever a ``config.json`` (of every family the loaders accept) or a GGUF file's metadata
(SmolLM2's, as ``llama`` and as ``qwen2``) holds, reading it gives a config or one ``CheckpointError`` in one line, and a value that breaks
its key's rule is named by the key; nothing else escapes (no ``TypeError``, ``KeyError`` or
``ZeroDivisionError`` from the arithmetic after it). Files that are not what they claim (a config
that is not UTF-8, a shard index that is not JSON or has no ``weight_map``) end the command line in
one line and exit 2, with nothing written. Derandomized: CI runs the same examples.
"""

from __future__ import annotations

import copy
import json
import math
import shutil
import types

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("transformers")
import transformers  # noqa: E402

from families import FAMILIES as TABLE  # noqa: E402
from nohair_jax.checkpoints import CheckpointError, architecture, checked_config  # noqa: E402
from nohair_jax.cli import main  # noqa: E402
from nohair_jax.metadata import CONFIG_SCHEMA, ROPE_SCHEMA, check_config  # noqa: E402

# One config.json per family the loaders accept, as transformers writes it (tests/families.py).
FAMILIES = {name: row.hf_config().to_dict() for name, row in TABLE.items()}
VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([2**31, 2**63, 10**30, 7, 25, 64]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(["", "12", "llama", "silu", "linear", "x" * 300]),
    st.lists(st.one_of(st.integers(-1, 2), st.text(max_size=3)), max_size=3),
    st.dictionaries(st.sampled_from(["rope_type", "type", "factor", "rope_theta", "x"]), st.one_of(st.integers(-1, 3), st.text(max_size=4)),
                    max_size=3),
)
ROPE_KEYS = [f"rope_scaling.{k}" for k in ROPE_SCHEMA]


def _set(hf: dict, key: str, value) -> None:
    if key.startswith("rope_scaling."):
        if not isinstance(hf.get("rope_scaling"), dict):
            hf["rope_scaling"] = {"rope_type": "linear", "factor": 2.0}
        hf["rope_scaling"][key.split(".", 1)[1]] = value
    else:
        hf[key] = value


def _schema(hf: dict) -> dict:
    """The rules a config is held to: the shared ones and its family's own."""
    return {**CONFIG_SCHEMA, **architecture(hf).schema}


def _breaks_its_rule(key: str, value, schema: dict) -> bool:
    rules = ROPE_SCHEMA if key.startswith("rope_scaling.") else schema
    rule = rules.get(key.split(".", 1)[1] if key.startswith("rope_scaling.") else key)
    return rule is not None and not rule.ok(value)


def _one_line(err: Exception) -> str:
    message = str(err)
    assert message and "\n" not in message, message
    return message


@settings(max_examples=600, deadline=None, derandomize=True)
@given(family=st.sampled_from(sorted(FAMILIES)), data=st.data())
def test_every_key_of_every_family_gives_a_config_or_one_line(family, data):
    hf = copy.deepcopy(FAMILIES[family])
    schema = _schema(hf)
    keys = sorted(set(hf) | set(schema)) + ROPE_KEYS
    changes = data.draw(st.lists(st.tuples(st.sampled_from(keys), VALUES), min_size=1, max_size=3))
    for key, value in changes:
        _set(hf, key, value)
    try:
        checked_config(hf, "config.json", None, None)
    except CheckpointError as err:
        message = _one_line(err)
        if len(changes) == 1 and _breaks_its_rule(*changes[0], schema):
            assert changes[0][0] in message and "expected" in message, message


@pytest.mark.parametrize("top", [[], [1, 2], "llama", 3, None, True])
def test_a_config_that_is_not_an_object_is_named(top):
    with pytest.raises(CheckpointError, match="config.json: expected a JSON object at the top level"):
        checked_config(top, "config.json", None, None)


@pytest.mark.parametrize("key, value, expected", [
    ("model_type", ["llama"], "a string"),
    ("max_position_embeddings", "2048", "a positive integer"),
    ("num_attention_heads", 0, "a positive integer"),
    ("rms_norm_eps", math.nan, "a positive finite number"),
    ("rope_scaling", "linear", "an object (a mapping) or null"),
    ("tie_word_embeddings", "yes", "true or false"),
])
def test_the_message_names_the_file_the_key_the_value_and_what_was_expected(key, value, expected):
    hf = dict(FAMILIES["llama"], **{key: value})
    with pytest.raises(CheckpointError) as caught:
        checked_config(hf, "folder/config.json", None, None)
    assert str(caught.value) == f"folder/config.json: {key} is {value!r}, expected {expected}"


class _Recording(dict):
    """A config that records every top-level key read from it."""

    def __init__(self, data, read: set):
        super().__init__(data)
        self.read = read

    def get(self, key, *default):
        self.read.add(key)
        return super().get(key, *default)

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key):
        self.read.add(key)
        return super().__contains__(key)


def test_the_schema_holds_every_key_the_loaders_read_and_lets_the_families_through():
    """Every top-level key the loaders read of each family's config.json has a rule in the schema or its
    family's own (a key read without one would reach the arithmetic unchecked), and every family's own config
    passes."""
    every: set = set()
    for family, hf in FAMILIES.items():
        assert check_config(copy.deepcopy(hf), family) == hf
        read: set = set()
        checked_config(_Recording(copy.deepcopy(hf), read), family, None, None)
        assert read <= set(_schema(hf)), (family, sorted(read - set(_schema(hf))))
        every |= read
    assert {"model_type", "vocab_size", "num_hidden_layers", "n_layer", "rotary_pct"} <= every


# ---------------------------------------------------------------------------------- GGUF metadata


@pytest.fixture(scope="module")
def smollm_metadata():
    from nohair_jax.checkpoints import packaged_model_path
    from nohair_jax.checkpoints.gguf_file import open_gguf

    try:
        reader = open_gguf(packaged_model_path("smollm2-135m"))
    except CheckpointError as err:
        pytest.skip(str(err))
    return _Metadata(fields=dict(reader.fields), tensors=reader.tensors)


class _Metadata(types.SimpleNamespace):
    def __repr__(self) -> str:  # hypothesis prints the fixture with a failing example: not its tensors
        return "<SmolLM2's GGUF metadata>"


def _gguf_rules() -> dict:
    """GGUF key (without the architecture) -> its rule: the config key's it becomes, or its own."""
    from nohair_jax.checkpoints.gguf_file import GGUF_ONLY, OPTIONAL_METADATA, REQUIRED_METADATA

    return {**{name: CONFIG_SCHEMA[key] for name, key in {**REQUIRED_METADATA, **OPTIONAL_METADATA}.items()},
            **GGUF_ONLY}


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_every_gguf_key_gives_a_config_or_one_line(smollm_metadata, data):
    from nohair_jax.checkpoints.gguf_file import GGUF_ARCHITECTURES, hf_config

    arch = data.draw(st.sampled_from(sorted(GGUF_ARCHITECTURES)))  # every GGUF architecture the loader accepts
    fields = {(f"{arch}." + k.removeprefix("llama.") if k.startswith("llama.") else k): v
              for k, v in smollm_metadata.fields.items()}
    fields["general.architecture"], tensors = arch, smollm_metadata.tensors
    fields[f"{arch}.attention.layer_norm_epsilon"] = 1e-5  # GPT-NeoX's LayerNorm needs its own epsilon
    rules = _gguf_rules()
    changes = data.draw(st.lists(st.tuples(st.sampled_from(sorted(rules) + ["general.architecture"]), VALUES),
                                 min_size=1, max_size=3))
    for key, value in changes:
        fields[key if key.startswith("general.") else f"{arch}.{key}"] = value
    reader = types.SimpleNamespace(fields=fields, tensors=tensors, path="model.gguf")
    try:
        checked_config(hf_config(reader, "model.gguf"), "model.gguf", None, None)
    except CheckpointError as err:
        message = _one_line(err)
        key, value = changes[0]
        if len(changes) == 1 and key in rules and not rules[key].ok(value):
            assert f"{arch}.{key} is" in message and "expected" in message, message


# ------------------------------------------------------------------------------ files, through the CLI


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    import torch

    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("llama")
    transformers.LlamaForCausalLM(TABLE["llama"].hf_config()).save_pretrained(folder)
    return folder


def _damage_config_bytes(folder):
    (folder / "config.json").write_bytes(b"\xff\xfe{}")


def _index_not_json(folder):
    (folder / "model.safetensors.index.json").write_text("{not json")


def _index_without_map(folder):
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}}))


def _config_value(key, value):
    def damage(folder):
        hf = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps(dict(hf, **{key: value})))
    return damage


@pytest.mark.parametrize("damage, named", [
    (_damage_config_bytes, "config.json is not valid JSON"),
    (_index_not_json, "model.safetensors.index.json is not valid JSON"),
    (_index_without_map, "model.safetensors.index.json: weight_map is None"),
    (_config_value("num_attention_heads", 0), "num_attention_heads is 0, expected a positive integer"),
    (_config_value("max_position_embeddings", "2048"), "max_position_embeddings is '2048'"),
    (_config_value("rope_scaling", "linear"), "rope_scaling is 'linear'"),
    (_config_value("model_type", ["llama"]), "model_type is ['llama']"),
])
def test_cli_on_damaged_metadata_says_so_in_one_line_and_writes_nothing(tiny_folder, tmp_path, capsys, damage, named):
    folder = tmp_path / "checkpoint"
    shutil.copytree(tiny_folder, folder)
    damage(folder)
    capsys.readouterr()
    out = tmp_path / "out"
    rc = main(["offsets", "--checkpoint", str(folder), "--prompt-len", "2", "--length", "8", "--pairs", "2",
               "--fit-t-min", "2", "--n-boot", "10", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and named in err and len(err.splitlines()) == 1, err
    assert not out.exists()
    assert np.all([p.name != "offsets.npz" for p in tmp_path.rglob("*")])


# ------------------------------------------------------------------------------------ damaged tokenizers


def test_a_damaged_tokenizer_warns_where_no_text_is_needed_and_stops_where_it_is(tiny_folder, tmp_path, capsys):
    folder = tmp_path / "checkpoint"
    shutil.copytree(tiny_folder, folder)
    (folder / "tokenizer.json").write_text('{"model": {"type": "BPE", "vocab": 3}}')
    named = f"{folder / 'tokenizer.json'}: the tokenizer cannot be read"
    base = ["offsets", "--checkpoint", str(folder), "--prompt-len", "2", "--length", "8", "--pairs", "2", "--n-boot", "10",
            "--fit-t-min", "2"]
    capsys.readouterr()
    assert main([*base, "--out", str(tmp_path / "random")]) == 0  # random token ids: no text, no tokenizer needed
    err = capsys.readouterr().err
    warning = [line for line in err.splitlines() if "warning" in line]
    assert warning == [f"nohair: warning: {named}; the model loads without a tokenizer"] or (
        len(warning) == 1 and named in warning[0]), err
    (tmp_path / "story.txt").write_text("Once upon a time there was a model. " * 4)
    rc = main([*base, "--prompt-a", "You are a pirate.", "--prompt-b", "You are a lawyer.",
               "--continuation-file", str(tmp_path / "story.txt"), "--out", str(tmp_path / "text")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and named in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "text").exists()
