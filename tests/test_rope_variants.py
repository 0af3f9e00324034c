"""RoPE scalings that choose by the call's length (``dynamic``, ``longrope``) and the factor tensors of GGUF
files (``rope_freqs``, ``rope_factors_short/long``) against transformers, in float64 on both sides.

Each tiny model is built by transformers inside ``float32_is_float64`` (so its RoPE frequencies are float64
too), its weights rounded to float32 values (so a GGUF file's F32 tensors hold them exactly), saved and
loaded back. Every call is compared at a length past the pretraining context (``ORIGINAL`` tokens), where
the long factors or the rescaled base act, and at one within it. Relative error is
``max |ours - theirs| / max |theirs|`` over one layer's hidden state (or the logits).
(``linear`` and ``llama3`` from config.json: tests/test_checkpoints.py's float64 test.)
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
pytest.importorskip("gguf")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import nohair_jax as nh  # noqa: E402
from nohair_jax.checkpoints import CheckpointError, checked_config  # noqa: E402
from nohair_jax.model import RopeScaling, rope_tables  # noqa: E402
from gguf_writer import SP_VOCAB_SIZE, VOCAB_SIZE, rope_factor_tensors, write_gguf  # noqa: E402
from torch_float64 import float32_is_float64  # noqa: E402
from test_gguf_checkpoint import reference as transformers_forward  # noqa: E402

ORIGINAL = 16  # the pretraining context: calls of LONG tokens take the long branch, of SHORT the short one
LONG, SHORT = 24, 10
# Every Llama here has the same shapes, so that their forward passes share compiled code; heads of 8 features
# (4 frequencies); Phi-3 heads of 16, half of them turned.
SIZES = dict(hidden_size=16, intermediate_size=40, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
             max_position_embeddings=64)
# Factors that float32 does not hold exactly (transformers rounds them to float32: so must we).
FACTORS = [list(np.random.default_rng(0).uniform(low, high, 4)) for low, high in ((1.0, 3.0), (2.0, 9.0))]
MODELS = {
    # Phi-3 128k's layout: longrope on half of each head (8 of 16 features, 4 factors), the top-level
    # original_max_position_embeddings, the attention factor derived from max_position_embeddings / it.
    "phi3_longrope": ("Phi3ForCausalLM", "phi3", transformers.Phi3Config(
        **dict(SIZES, hidden_size=32), vocab_size=SP_VOCAB_SIZE, partial_rotary_factor=0.5, pad_token_id=0, eos_token_id=1,
        original_max_position_embeddings=ORIGINAL,
        rope_scaling=dict(rope_type="longrope", short_factor=FACTORS[0], long_factor=FACTORS[1]))),
    # longrope on a Llama: the pretraining context inside the RoPE settings, an attention factor given.
    "llama_longrope": ("LlamaForCausalLM", "llama", transformers.LlamaConfig(
        **SIZES, vocab_size=VOCAB_SIZE, rope_scaling=dict(
            rope_type="longrope", short_factor=FACTORS[0], long_factor=FACTORS[1],
            original_max_position_embeddings=ORIGINAL, attention_factor=1.3))),
    # Dynamic NTK: the base rescaled past max_position_embeddings.
    "llama_dynamic": ("LlamaForCausalLM", "llama", transformers.LlamaConfig(
        **dict(SIZES, max_position_embeddings=ORIGINAL), vocab_size=VOCAB_SIZE,
        rope_scaling=dict(rope_type="dynamic", factor=3.0), rope_theta=500.0)),
    # Llama 3.1's scaling, which a GGUF file carries as rope_freqs.weight; all three of its bands act.
    "llama3": ("LlamaForCausalLM", "llama", transformers.LlamaConfig(
        **SIZES, vocab_size=VOCAB_SIZE, rope_theta=500.0, rope_scaling=dict(
            rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
            original_max_position_embeddings=64))),
}
TOLERANCE = 1e-9


def _build(name: str):
    """The transformers model, built in float64 (its RoPE buffers too), weights perturbed and rounded to float32."""
    cls, _, config = MODELS[name]
    torch.manual_seed(0)
    model, rng = getattr(transformers, cls)(config), np.random.default_rng(0)
    with torch.no_grad():
        for p in model.parameters():
            noisy = p.detach().numpy() + 0.1 * rng.standard_normal(p.shape)
            p.copy_(torch.from_numpy(noisy.astype(np.float32).astype(np.float64)))
    return model.eval()


@pytest.fixture(scope="module")
def reference():
    """name -> (transformers model, {length: (tokens, hidden [L+1, B, T, D] with the last block's output last,
    logits)}), built once."""
    cache = {}

    def get(name):
        if name not in cache:
            with float32_is_float64():
                model = _build(name)
                runs = {}
                for length in (LONG, SHORT):  # long first: transformers' dynamic then resets for the short call
                    tokens = np.random.default_rng(length).integers(0, model.config.vocab_size, (2, length))
                    runs[length] = tokens, *transformers_forward(model, tokens)
            cache[name] = model, runs
        return cache[name]

    return get


def _max_error(model, runs) -> dict[int, float]:
    """length -> the largest relative error over the hidden states and the logits, in float64."""
    errors = {}
    for length, (tokens, hidden, logits) in runs.items():
        out = model(jnp.asarray(tokens, jnp.int32))
        rel = [np.max(np.abs(np.asarray(ours) - theirs)) / np.max(np.abs(theirs))
               for ours, theirs in [*zip(out.hidden, hidden), (out.logits, logits)]]
        errors[length] = float(max(rel))
    return errors


@pytest.mark.parametrize("name", ["phi3_longrope", "llama_longrope", "llama_dynamic"])
def test_config_json_matches_transformers_float64(reference, name, tmp_path):
    hf, runs = reference(name)
    hf.save_pretrained(tmp_path)
    if name == "phi3_longrope":  # Phi3Config's top-level context replaces the RoPE settings' own
        config = json.loads((tmp_path / "config.json").read_text())
        config["rope_parameters"]["original_max_position_embeddings"] = 2 * LONG
        (tmp_path / "config.json").write_text(json.dumps(config))
    with jax.enable_x64(True):
        model, _ = nh.load_checkpoint(tmp_path, dtype="float64")
        errors = _max_error(model, runs)
    scaling = model.config.rope_scaling
    assert (scaling.kind, scaling.original_max_len) == (name.split("_")[1], ORIGINAL)
    if name == "phi3_longrope":
        assert scaling.attention_factor == math.sqrt(1 + math.log(64 / ORIGINAL) / math.log(ORIGINAL))
    print(name, "float64 max relative error by length", errors)
    assert max(errors.values()) < TOLERANCE, errors


@pytest.mark.parametrize("name", ["phi3_longrope", "llama3"])
def test_gguf_factor_tensors_match_transformers_float64(reference, name, tmp_path):
    """Phi-3's rope_factors_short/long load as its config.json's longrope (the file's float32 rms_norm_eps
    leaves 6e-11); Llama 3.1's rope_freqs as the inverse frequencies divided by its float32 divisors, what
    llama.cpp computes: their rounding (6e-8 relative at most) leaves about 1e-8 against transformers' llama3."""
    hf, runs = reference(name)
    path = write_gguf(tmp_path / f"{name}.gguf", hf, MODELS[name][1])
    with jax.enable_x64(True):
        model, _ = nh.load_checkpoint(path, dtype="float64")
        errors = _max_error(model, runs)
    print(name, "GGUF float64 max relative error by length", errors)
    if name == "llama3":
        assert model.config.rope_scaling == RopeScaling("factors", factors=rope_factor_tensors(hf.config)["rope_freqs.weight"].tolist())
        assert max(errors.values()) < 1e-7, errors
    else:
        assert model.config.rope_scaling.kind == "longrope"
        assert max(errors.values()) < TOLERANCE, errors


def _llama3_divisors(inv_freq: np.ndarray, factor: float, low: float, high: float, original: int) -> np.ndarray:
    """llama.cpp's converter's rope_freqs (LlamaModel.generate_extra_tensors), in float64: 1 for the short
    wavelengths, ``factor`` for the long ones, ``1 / ((1 - s) / factor + s)`` between."""
    wavelength = 2 * np.pi / inv_freq
    smooth = (original / wavelength - low) / (high - low)
    return np.where(wavelength < original / high, 1.0,
                    np.where(wavelength > original / low, factor, 1 / ((1 - smooth) / factor + smooth)))


def test_factors_from_the_llama3_rule_give_the_llama3_frequencies():
    llama3 = RopeScaling("llama3", 8.0, 1.0, 4.0, original_max_len=64)
    inv_freq = 1.0 / 500.0 ** (np.arange(0, 16, 2) / 16)
    divisors = _llama3_divisors(inv_freq, 8.0, 1.0, 4.0, 64)
    assert len(set(np.round(divisors, 6))) > 2  # kept, divided and interpolated frequencies
    with jax.enable_x64(True):
        ours = rope_tables(3, 16, 500.0, jnp.float64, RopeScaling("factors", factors=divisors.astype(np.float32).tolist()))
        theirs = rope_tables(3, 16, 500.0, jnp.float64, llama3)
    angle = lambda cos, sin: np.arctan2(np.asarray(sin[1, :8]), np.asarray(cos[1, :8]))  # noqa: E731
    # float32 divisors (as the file stores them, and the model rounds them): within float32's rounding.
    np.testing.assert_allclose(angle(*ours), angle(*theirs), rtol=1e-7)
    exact = inv_freq / divisors  # the rule itself, unrounded: llama3's frequencies
    np.testing.assert_allclose(exact, angle(*theirs), rtol=1e-14)


def test_new_kinds_round_trip_and_bad_values_are_refused_by_field():
    for scaling in (RopeScaling("longrope", original_max_len=16, factors=(1.0, 1.5), long_factors=(2.0, 4.0),
                                attention_factor=1.2),
                    RopeScaling("dynamic", 2.0, original_max_len=16), RopeScaling("factors", factors=(1.0, 8.0))):
        cfg = nh.TransformerConfig(position="rope", n_heads=32, rope_scaling=scaling)  # head_dim 4: 2 frequencies
        assert nh.TransformerConfig(**json.loads(json.dumps(cfg.to_dict()))) == cfg
    refused = [
        (dict(kind="yarn", factor=2.0), "RopeScaling.kind='yarn' is not one of"),
        (dict(kind="longrope", factors=(1.0, 2.0), long_factors=(1.0,)), "RopeScaling.long_factors has 1 entries, factors 2"),
        (dict(kind="longrope", long_factors=(1.0,)), "RopeScaling.factors must be given for kind 'longrope'"),
        (dict(kind="factors", factors=(1.0, -2.0)), "RopeScaling.factors must be a list of finite numbers > 0"),
        (dict(kind="linear", factor=2.0, factors=(1.0,)), "RopeScaling.factors is read by kind longrope and factors only"),
        (dict(kind="dynamic", factor=2.0, attention_factor=2.0), "RopeScaling.attention_factor is read by kind longrope only"),
    ]
    for fields, message in refused:
        with pytest.raises(ValueError, match=message.replace("(", r"\(")) as err:
            RopeScaling(**fields)
        assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match=r"RopeScaling.factors has 3 entries, expected 2 \(one per rotated frequency"):
        rope_tables(4, 4, 10000.0, jnp.float32, RopeScaling("factors", factors=(1.0, 2.0, 3.0)))


def test_refusals_name_the_setting(tmp_path):
    config = MODELS["llama_longrope"][2].to_dict()
    config["rope_parameters"]["long_factor"] = [1.0, 2.0, 3.0]
    with pytest.raises(CheckpointError, match=r"config.json: rope_parameters.long_factor has 3 entries, expected 4"):
        checked_config(config, "config.json", "float32", None)
    phi3 = MODELS["phi3_longrope"][2].to_dict()
    phi3["rope_parameters"] = dict(rope_type="linear", factor=2.0)  # Phi3Config refuses every type but longrope
    with pytest.raises(CheckpointError, match=r"rope type 'linear' \(supported: default, longrope\)"):
        checked_config(phi3, "config.json", "float32", None)
    hf = _build("llama3")
    path = write_gguf(tmp_path / "qwen2.gguf", hf, "qwen2")  # with the rope_freqs.weight of its llama3 scaling
    with pytest.raises(CheckpointError) as err:
        nh.load_checkpoint(path)
    assert str(err.value) == (f"{path}: the RoPE factor tensor rope_freqs.weight in a qwen2 file is not supported (read: "
                              f"rope_freqs.weight in llama files, rope_factors_short/long.weight in phi3 files)")
    phi3 = _build("phi3_longrope")
    for name, written, message in [
        ("short", dict(hf_model=hf, arch="llama", extra={"rope_freqs.weight": np.ones(3, np.float32)}),
         "the tensor rope_freqs.weight has shape [3], expected [4] (one factor per rotated frequency"),
        ("one_set", dict(hf_model=phi3, arch="phi3", drop=("rope_factors_short.weight",)),
         "Phi-3's longrope RoPE without rope_factors_short.weight"),
        ("attn_factor", dict(hf_model=phi3, arch="phi3", skip_metadata=("rope.scaling.attn_factor",),
                             metadata={"phi3.rope.scaling.attn_factor": 1.5}),
         "phi3.rope.scaling.attn_factor is 1.5, not longrope's 1.22474487 (context 64, pretrained at 16)"),
    ]:
        path = write_gguf(tmp_path / f"{name}.gguf", **written)
        with pytest.raises(CheckpointError) as err:
            nh.load_checkpoint(path)
        assert str(err.value).startswith(f"{path}: {message}") and "\n" not in str(err.value), str(err.value)
