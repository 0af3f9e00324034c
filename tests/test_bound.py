"""The bound on real models (nohair_jax.bound): conditions against direct computation, the explicit
bound never violated on random untrained models, failing conditions reported, `nohair bound`."""

import dataclasses
import json

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nohair_jax as nh
from nohair_jax import bound, relay
from nohair_jax.cli import main
from nohair_jax.fit import FitRefused


def _model(**kwargs):
    cfg = nh.TransformerConfig(**{"vocab_size": 64, "d_model": 16, "n_heads": 2, "n_layers": 2, "max_len": 64, **kwargs})
    return nh.Transformer(cfg, rngs=nnx.Rngs(0))


@settings(max_examples=4, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**16),
    depth=st.integers(1, 4),
    width=st.sampled_from([16, 24, 32]),
    heads=st.sampled_from([1, 2, 4]),
    grouped=st.booleans(),
    mlp=st.sampled_from(["gelu", "gelu_tanh", "relu", "swiglu"]),
    norm=st.sampled_from(["layernorm", "rmsnorm"]),
    position=st.sampled_from(["learned", "sinusoidal", "rope", "none"]),
    init_std=st.sampled_from([0.02, 0.1, 0.3]),
    prompt_len=st.integers(1, 8),
    length=st.integers(8, 128),
)
def test_explicit_bound_holds_on_random_untrained_models(
    seed, depth, width, heads, grouped, mlp, norm, position, init_std, prompt_len, length
):
    cfg = nh.TransformerConfig(
        vocab_size=64, d_model=width, n_heads=heads, n_kv_heads=1 if grouped else None, n_layers=depth, mlp=mlp,
        norm=norm, position=position, init_std=init_std, max_len=prompt_len + length,
    )
    model = nh.Transformer(cfg, rngs=nnx.Rngs(seed))
    pairs = nh.random_prompt_pairs(seed, 2, prompt_len, length, cfg.vocab_size)
    off = nh.prompt_pair_offsets(model, *pairs)
    cond = bound.measure_conditions(model, *pairs)
    assert cond.failures() == []
    bounds = bound.explicit_bounds(cond, length)
    worst = off.l2.max(axis=0)  # [L+1, T], max over pairs
    assert (worst[1:] <= bounds["recursion"][1:]).all()
    late = off.t >= bounds["t0"]
    assert (worst[1:, late] <= bounds["closed"][1:, late]).all()
    assert np.isnan(bounds["closed"][1:, ~late]).all()
    assert all(e.holds and e.holds_closed and e.margin >= 1 for e in bound.explicit_check(off.l2, **{
        k: bounds[k] for k in ("recursion", "closed")}))


def test_conditions_match_direct_computation():
    model = _model(n_heads=4, n_kv_heads=2, mlp="swiglu", qkv_bias=True, position="rope")
    # Biases at init are zero; give them values so that their norms are measured, not assumed.
    for blk in model.blocks:
        blk.attn.q.bias[...] = jnp.linspace(-1, 1, blk.attn.q.bias.shape[0])
        blk.attn.k.bias[...] = 0.5
        blk.attn_norm.bias[...] = 0.1
        blk.mlp_norm.scale[...] = jnp.linspace(-2, 1, 16)
    pairs = nh.random_prompt_pairs(3, 3, 5, 20, 64)
    cond = bound.measure_conditions(model, *pairs)

    a, b, c = pairs
    forward = nnx.jit(lambda m, tokens: m(tokens, probe=bound.BoundQuantities()))
    logit, scale, prompt = [], [], []
    for run in (a, b):
        out = forward(model, jnp.concatenate([run, c], axis=1))
        logit.append(np.asarray(out.attention).max(axis=1))
        scale.append(np.asarray(out.norms).min(axis=(1, 2)))
        prompt.append(np.asarray(out.hidden[:, :, :5], np.float64))
    np.testing.assert_allclose(cond.logit_bound, np.maximum(*logit), rtol=1e-5)
    np.testing.assert_allclose(cond.sigma_min, np.minimum(*scale), rtol=1e-5)
    np.testing.assert_allclose(cond.prompt_offsets, np.linalg.norm(prompt[0] - prompt[1], axis=-1).max(axis=(1, 2)),
                               rtol=1e-5)
    blk = model.blocks[1]
    for name, layer_module in (("q", blk.attn.q), ("k", blk.attn.k), ("v", blk.attn.v), ("o", blk.attn.o),
                               ("up", blk.mlp.up), ("gate", blk.mlp.gate), ("down", blk.mlp.down)):
        kernel = np.asarray(layer_module.kernel[...], np.float64)
        assert cond.weight_norms[name][1] == pytest.approx(np.linalg.svd(kernel, compute_uv=False)[0], rel=1e-12)
    assert cond.bias_norms["q"][1] == pytest.approx(np.linalg.norm(np.linspace(-1, 1, 16)), rel=1e-6)
    assert cond.bias_norms["k"][1] == pytest.approx(0.5 * np.sqrt(8), rel=1e-6)  # 2 kv heads of 4
    assert cond.bias_norms["up"][1] == 0.0  # zero at init
    assert cond.gain[3] == pytest.approx(2.0) and cond.gain[2] == 1.0
    assert cond.norm_bias[2] == pytest.approx(0.1 * 4) and cond.norm_bias[3] == 0.0
    assert (cond.group, cond.head_dim, cond.d_model, cond.prompt_len) == (2, 4, 16, 5)
    assert cond.failures() == []


def test_failing_conditions_are_reported(tmp_path):
    pairs = nh.random_prompt_pairs(0, 2, 4, 16, 64)
    # Embeddings a million times smaller: the first norm's input sits far below sqrt(eps).
    tiny = _model()
    tiny.embed.embedding[...] *= 1e-6
    tiny.pos_embed.embedding[...] *= 1e-6
    cond = bound.measure_conditions(tiny, *pairs)
    assert cond.sigma_min[0] < cond.floor
    failures = cond.failures()
    assert failures[0].startswith("layer 1 attention norm: input scale floor sigma_min")
    assert all("norm: input scale floor" in r for r in failures)  # only the floor fails
    # Below the floor the bound is still valid, only huge: it is computed, not refused.
    assert np.isfinite(bound.explicit_bounds(cond, 16)["recursion"]).all()

    assert cond.not_derived() == []
    for change, reason, breaks_a_condition in (
        (dict(layout=nh.BlockLayout("post")), "not pre-LN", True), (dict(prompt_logit_bias=True), "prompt logit bias", True),
        (dict(alibi=True), "ALiBi", True), (dict(sliding_window=8), "sliding window of 8", True),
        (dict(qk_norm=True), "QK-norm", False),  # bounded logits hold; only the constants are not derived
    ):
        failing = dataclasses.replace(cond, **change)
        assert any(r.startswith(reason) for r in failing.failures()) == breaks_a_condition
        with pytest.raises(bound.BoundNotApplicable, match=reason):
            bound.explicit_bounds(failing, 16)

    # What the model has is read from its config; a window as long as the sequences changes nothing.
    for change, fields in ((dict(position="alibi", sliding_window=4), dict(alibi=True, sliding_window=4)),
                           (dict(sliding_window=20, qk_norm=True), dict(sliding_window=None, qk_norm=True))):
        measured = bound.measure_conditions(_model(**change), *pairs)
        assert {k: getattr(measured, k) for k in fields} == fields

    # A post-LN model end to end: the conditions say why, the files are written, the bound is refused.
    summary = bound.check_bound(_model(norm_placement="post"), pairs, tmp_path, n_boot=20, progress=False)
    assert summary["conditions"]["layout"] == dict(placement="post", parallel=False)
    assert summary["conditions"]["failures"][0].startswith("not pre-LN")
    refused = bound.explicit_from_saved(summary["explicit"])
    assert isinstance(refused, bound.NotApplicable) and "not pre-LN" in refused.reason
    assert "explicit bound not applicable" in bound.report(summary)
    assert (tmp_path / "bound.png").stat().st_size > 5_000


@pytest.mark.parametrize("placement, names, attention, mlp", [
    ("pre", ("attention", "MLP"), [0.0, 2.0], [1.0, 3.0]),
    ("output", ("attention output", "MLP output"), [0.0, 2.0], [1.0, 3.0]),
    ("sandwich", ("attention", "attention output", "MLP", "MLP output"), [0.0, 4.0], [2.0, 6.0]),
])
def test_norm_scales_are_read_by_the_blocks_layout(placement, names, attention, mlp):
    """sigma_min lists each block's norms in forward order (then the final norm): the layout names them
    and says which sublayer each belongs to, so a sandwich block's four norms are not read as two blocks'."""
    per = len(names)
    values = np.arange(2 * per + 1, dtype=float)  # sandwich, layer 2: norms 4..7, its attention's 4 and 5
    cond = dataclasses.replace(_made_up_conditions(), layout=nh.BlockLayout(placement), sigma_min=values,
                               gain=np.ones(2 * per + 1), norm_bias=np.zeros(2 * per + 1))
    assert cond.block_norm_names() == names
    by_sublayer = cond.sigma_by_sublayer()
    np.testing.assert_array_equal(by_sublayer["attention"], attention)
    np.testing.assert_array_equal(by_sublayer["mlp"], mlp)


def _made_up_conditions() -> bound.BoundConditions:
    """A 2-layer pre-LN model's conditions, made up (forward order of norms: attn 1, MLP 1, attn 2, MLP 2, final)."""
    norms = lambda *v: np.array(v, dtype=float)  # noqa: E731
    return bound.BoundConditions(
        prompt_len=5, layout=nh.BlockLayout(), mlp="relu", prompt_logit_bias=False, norm_eps=1e-5, d_model=16,
        head_dim=4, group=1, logit_bound=norms(0.1, 0.2), sigma_min=norms(0.5, 0.25, 1.0, 2.0, 9.0),
        gain=norms(1.0, 2.0, 1.5, 1.0, 9.0), norm_bias=norms(0.1, 0.0, 0.2, 0.3, 9.0),
        weight_norms={k: norms(0.5, 0.7) for k in ("q", "k", "v", "o", "up", "gate", "down")},
        bias_norms={k: norms(0.0, 0.1) for k in ("q", "k", "up", "gate")}, prompt_offsets=norms(0.3, 0.6, 99.0),
    )


def test_explicit_bounds_are_wired_to_the_right_conditions():
    cond = _made_up_conditions()
    values = cond.block_values()
    np.testing.assert_array_equal(values["sigma_attn"], [0.5, 1.0])
    np.testing.assert_array_equal(values["sigma_mlp"], [0.25, 2.0])
    np.testing.assert_array_equal(values["g_mlp"], [2.0, 1.0])
    np.testing.assert_array_equal(values["beta_attn"], [0.1, 0.2])
    # Layer 1 by hand (relu, G = 1): R = sqrt(16) + 0.1, V = 0.5 * 4, K = Q = 0.5 R.
    radius, v = 4.1, 2.0
    alpha_q = 0.5 * v * 0.5 * radius * 0.5 / 2
    alpha_kv = 0.5 * (0.5 + 2 * v * 0.5 * radius * 0.5 / 2)
    mlp_gain = 1 + 2.0 / 0.25 * 0.5 * 0.5
    a1, b1 = mlp_gain * (1 + alpha_q / 0.5), mlp_gain * np.exp(0.2) * alpha_kv / 0.5
    out = bound.explicit_bounds(cond, 40)
    assert out["a"][0] == pytest.approx(a1, rel=1e-12) and out["b"][0] == pytest.approx(b1, rel=1e-12)
    # The recursion with D_0, D_1 (not D_2), and C_1 = D_0 b_1 from t0 = max(P, 3) on.
    n = 5 + np.arange(1.0, 41)
    layer1 = 5 * 0.3 * b1 / n
    layer2 = out["a"][1] * layer1 + out["b"][1] * (5 * 0.6 + np.cumsum(layer1)) / n
    np.testing.assert_allclose(out["recursion"], [np.zeros(40), layer1, layer2], rtol=1e-12)
    assert out["t0"] == 5 and out["C"][0] == pytest.approx(0.3 * b1, rel=1e-12)
    np.testing.assert_allclose(out["closed"][1, 4:], 0.3 * b1 * 5 / np.arange(5.0, 41), rtol=1e-12)
    assert np.isnan(out["closed"][1:, :4]).all()


def test_shape_check_tells_the_relay_shape_from_slower_decay():
    # Synthetic offsets: the relay model's own shape times noise passes; a t^0.3 slower decay fails.
    prompt_len, length, depth = 8, 400, 3
    t = np.arange(1, length + 1)
    rng = np.random.default_rng(0)
    shape = np.asarray(relay.offsets(prompt_len, length, depth))
    noise = np.exp(rng.normal(0, 0.05, (6, 1, length)))
    same = bound.shape_check(t, shape[None] * noise, prompt_len, n_boot=200)
    slower = bound.shape_check(t, shape[None] * noise * t**0.3, prompt_len, n_boot=200)
    for s, w in zip(same, slower):
        assert s.passes and abs(s.slope) < 0.02 and s.relay_prefactor == pytest.approx(1, rel=0.05)
        assert not w.passes and w.slope == pytest.approx(0.3, abs=0.02)
        assert s.interval[0] <= s.slope <= s.interval[1] and s.window == (length // 16, length)
    # The relay shape itself rises against the literal P (log t)^(l-1) / t at these t: why it is not the test.
    assert all(s.slope_log_shape > 0 for s in same)
    # A layer whose offsets are 0 somewhere in the window cannot be fitted: a refusal in its place.
    zeros = shape[None] * noise
    zeros[:, 2, -1] = 0.0
    refused = bound.shape_check(t, zeros, prompt_len, n_boot=0)
    assert isinstance(refused[1], FitRefused) and [type(r) for r in (refused[0], refused[2])] == [bound.ShapeCheck] * 2


def test_explicit_check_finds_a_violation():
    l2 = np.full((2, 2, 10), 0.5)
    recursion = np.ones((2, 10))
    closed = np.full((2, 10), np.nan)
    closed[:, 3:] = 2.0
    l2[1, 1, 6] = 1.25  # one pair, one position above the bound
    (entry,) = bound.explicit_check(l2, recursion, closed)
    assert not entry.holds and entry.margin == pytest.approx(0.8) and entry.t_margin == 7
    assert entry.holds_closed and entry.margin_closed == pytest.approx(1.6) and entry.t_margin_closed == 7


def test_saved_records_read_back_as_they_were_and_as_older_files_wrote_them():
    """JSON round trips of every record type, and the forms files written before the types hold:
    ``{"layer", "error"}`` for a refused layer, ``[null, null]`` for a missing interval, null for inf."""
    from nohair_jax.bound.records import constants_from_saved

    def saved(x):
        return json.loads(json.dumps(x, allow_nan=False))
    shape = bound.ShapeCheck(layer=2, window=(8, 128), slope=-0.1, interval=(-0.2, 0.05), slope_log_shape=0.3,
                             interval_log_shape=None, relay_prefactor=1.5, passes=True)
    assert bound.shape_from_dict(saved(shape.to_dict())) == shape
    older = dict(shape.to_dict(), interval=[None, None])
    assert bound.shape_from_dict(older).interval is None
    assert bound.shape_from_dict({"layer": 3, "error": "too short"}) == FitRefused("too short")
    check = bound.ExplicitCheck(layer=1, margin=2.5, t_margin=9, holds=True, margin_closed=None, t_margin_closed=None,
                                holds_closed=True)  # a closed-form margin of inf, as JSON keeps it
    assert bound.explicit_from_saved(saved([check.to_dict()])) == [check]
    assert bound.explicit_from_saved(saved(bound.NotApplicable("not pre-LN").to_dict())) == bound.NotApplicable("not pre-LN")
    assert constants_from_saved({"error": "qk_norm"}) == bound.NotApplicable("qk_norm")
    assert constants_from_saved({"C": [1.0, None], "a": [1.0], "b": [2.0]})["C"] == [1.0, None]


def test_bound_command_writes_its_files_and_prints_the_table(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["--depth", "2", "--d-model", "16", "--heads", "2", "--prompt-len", "4", "--length", "64", "--pairs", "3",
            "--n-boot", "50", "--out", str(out)]
    assert main(["bound", *args]) == 0
    printed = capsys.readouterr().out
    assert "conditions of the theorem" in printed and "all conditions hold" in printed
    saved = json.loads((out / "bound.json").read_text())
    assert saved["model"]["n_layers"] == 2 and len(saved["shape"]) == len(saved["explicit"]) == 2
    assert (out / "bound.png").stat().st_size > 10_000
    with np.load(out / "bound.npz") as data:
        assert data["l2"].shape == (3, 3, 64) and data["recursion"].shape == data["closed"].shape == (3, 64)
        # The reported margins are what the saved arrays give.
        for layer, entry in enumerate(saved["explicit"], start=1):
            margin = (data["recursion"][layer] / data["l2"][:, layer].max(axis=0)).min()
            assert entry["holds"] and entry["margin"] == pytest.approx(margin, rel=1e-12)
            assert f"{entry['margin']:.3g}" in printed


def test_bound_figure_of_a_bound_beyond_float64_draws_the_rest(tmp_path):
    """A deep trained model's constants overflow float64 (SmolLM2's from layer 7 on): those layers'
    panels say so, the others draw their finite bound, and a 30-layer model gets 9 panels."""
    out = tmp_path / "run"
    assert main(["bound", "--depth", "2", "--d-model", "16", "--heads", "2", "--prompt-len", "4", "--length", "32",
                 "--pairs", "2", "--n-boot", "20", "--out", str(out)]) == 0
    from nohair_jax.bound.render import bound_figure

    summary = json.loads((out / "bound.json").read_text())
    with np.load(out / "bound.npz") as data:
        recursion, closed = data["recursion"].copy(), data["closed"].copy()
        recursion[2], closed[2] = np.inf, np.inf
        fig = bound_figure(data["t"], data["l2"], data["relay_shape"], summary, recursion, closed)
        titles = [ax.get_title() for ax in fig.axes if ax.get_visible()]
        assert titles[1] == "layer 2: explicit bound beyond float64" and titles[0].startswith("layer 1: bound / measured")
        deep = np.repeat(data["l2"][:, 1:2], 31, axis=1)  # 30 layers of the same curve
        summary["shape"] = summary["shape"][:1] * 30
        assert sum(ax.get_visible() for ax in bound_figure(data["t"], deep, np.repeat(data["relay_shape"][:2], 16, axis=0)[:31],
                                                           summary).axes) == 9


# Tiny models of each family's architecture (d_head 8): the bug's Gemma scale 1/sqrt(d_head) written as a float32,
# Gemma 2 27B's other scale, soft caps, the normalised sublayer outputs (init_std 0.5: their inputs clear sqrt(eps)).
_FAMILIES = {
    "pre-LN (Llama)": dict(mlp="swiglu", norm="rmsnorm", position="rope"),
    "sandwich (Gemma 2)": dict(norm_placement="sandwich", mlp="geglu", norm="rmsnorm", init_std=0.5,
                               attn_scale=float(np.float32(8 ** -0.5)), attn_softcap=5.0, final_softcap=3.0),
    "another logit scale (Gemma 2 27B)": dict(attn_scale=0.3),
    "output norms (OLMo 2)": dict(norm_placement="output", norm="rmsnorm", init_std=0.5, qk_norm=True),
    "parallel residual (GPT-NeoX)": dict(parallel_residual=True, position="rope", rotary_fraction=0.25),
    "post-LN": dict(norm_placement="post"),
    "window and ALiBi": dict(position="alibi", sliding_window=4),
}


@pytest.mark.parametrize("change", _FAMILIES.values(), ids=_FAMILIES.keys())
def test_no_printed_condition_contradicts_the_verdict(change):
    """`nohair bound` once printed "pre-LN: False" above "all conditions hold", and "scaled by 0.0625, not
    1/sqrt(d_head) = 0.0625": every condition is now printed with the verdict its own values got, and the
    summary line is theirs."""
    import re

    from nohair_jax.results import jsonable

    pairs = nh.random_prompt_pairs(0, 2, 4, 8, 64)
    cond = bound.measure_conditions(_model(n_layers=1, max_len=12, **change), *pairs)
    bounds, explicit = bound.explicit_result(cond, np.zeros((1, 2, 8)), 8)
    printed = bound.report(jsonable({"conditions": cond.to_dict(), "shape": [{"error": "not fitted here"}],
                                     "explicit": explicit.to_dict() if bounds is None else [e.to_dict() for e in explicit]}))
    # No value is said to differ from itself ("0.0625, not 1/sqrt(d_head) = 0.0625").
    for said, other in re.findall(r"(\d[\d.e+-]*), not [^=,;:]*= (\d[\d.e+-]*)", printed):
        assert float(said) != float(other), printed
    assert ("scaled by" in printed) == (change.get("attn_scale") == 0.3)
    # Each condition printed once with its verdict; "all conditions hold" exactly when none is printed failing.
    verdicts = re.findall(r"^  (.+): (holds|FAILS) \(", printed, flags=re.MULTILINE)
    assert len(verdicts) == 4, printed
    failing = [asks for asks, verdict in verdicts if verdict == "FAILS"]
    assert ("all conditions hold" in printed) == (not failing) == (not cond.failures())
    assert all(reason in printed for reason in cond.failures())
    assert verdicts == [(c.asks, "holds" if c.holds else "FAILS") for c in cond.conditions()]
