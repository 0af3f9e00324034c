"""Offsets: exact zeros, causality, the dilution closed form, batch invariance, input errors."""

import functools
import gc

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import nohair_jax as nh
from nohair_jax import offsets
from nohair_jax.offsets import check_pairs, next_token_kl, pair_offsets



def pairs(n=3, P=5, T=12, vocab=64, seed=0):
    return nh.random_prompt_pairs(seed, n, P, T, vocab)


@pytest.mark.parametrize("float64", [False, True])
def test_identical_prompts_and_layer_zero_are_exactly_zero(float64, make_tiny):
    model = make_tiny()
    a, b, c = pairs(n=4)
    b = b.copy()
    b[2] = a[2]  # pair 2: identical prompts
    off = nh.prompt_pair_offsets(model, a, b, c, float64=float64)
    assert off.l2.dtype == (np.float64 if float64 else np.float32)
    assert np.all(off.l2[:, 0] == 0) and np.all(off.relative[:, 0] == 0)
    assert np.all(off.l2[2] == 0) and np.all(off.kl[2] == 0)
    # The other pairs really differ, so the zeros above are not vacuous.
    assert np.all(off.l2[[0, 1, 3], 1:] > 0)


def test_causal_later_tokens_do_not_matter(make_tiny, tiny_config):
    model = make_tiny()
    a, b, c = pairs(n=2, T=12)
    c2 = c.copy()
    c2[:, 7:] = (c2[:, 7:] + 1) % tiny_config.vocab_size  # change continuation tokens t = 8..12
    off, off2 = (nh.prompt_pair_offsets(model, a, b, cc, float64=True) for cc in (c, c2))
    np.testing.assert_array_equal(off.l2[..., :7], off2.l2[..., :7])
    np.testing.assert_array_equal(off.kl[:, :7], off2.kl[:, :7])
    assert not np.allclose(off.l2[..., 7:], off2.l2[..., 7:])


def _layernorm(x, scale, bias, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * scale + bias


def test_uniform_attention_gives_dilution_closed_form(make_tiny):
    """Zero query/key weights: attention averages uniformly, so layer 1's offset at t is
    || W_o^T sum_{j <= P} (v_a(j) - v_b(j)) || / (P + t) (docs/definitions.md#bound), with the MLP off."""
    model = make_tiny(n_layers=1)
    cfg = model.config
    attn, mlp = model.blocks[0].attn, model.blocks[0].mlp
    for lin in (attn.q, attn.k, mlp.down):
        lin.kernel[...] = 0 * lin.kernel[...]
        lin.bias[...] = 0 * lin.bias[...]
    P, T = 6, 40
    a, b, c = pairs(n=2, P=P, T=T)
    off = nh.prompt_pair_offsets(model, a, b, c, float64=True)

    params = nnx.to_pure_dict(nnx.state(model))
    emb = np.asarray(params["embed"]["embedding"], np.float64)
    pos = np.asarray(params["pos_embed"]["embedding"], np.float64)
    blk = params["blocks"][0]
    norm = blk["attn_norm"]
    w_v, w_o = (np.asarray(blk["attn"][k]["kernel"], np.float64) for k in ("v", "o"))

    def prompt_values(prompt):  # [P, D] value vectors of the prompt positions
        h0 = emb[prompt] + pos[:P]
        return _layernorm(h0, np.asarray(norm["scale"]), np.asarray(norm["bias"]), cfg.norm_eps) @ w_v

    t = np.arange(1, T + 1)
    for i in range(2):
        summed = (prompt_values(a[i]) - prompt_values(b[i])).sum(0) @ w_o  # [D]
        expected = np.linalg.norm(summed) / (P + t)
        np.testing.assert_allclose(off.l2[i, 1], expected, rtol=1e-12)


def test_a_pair_alone_or_among_others_gives_the_same_bits(make_tiny):
    model = make_tiny()
    a, b, c = pairs(n=5)
    whole = nh.prompt_pair_offsets(model, a, b, c)
    alone = nh.prompt_pair_offsets(model, a[3:4], b[3:4], c[3:4])
    np.testing.assert_array_equal(alone.l2[0], whole.l2[3])
    np.testing.assert_array_equal(alone.kl[0], whole.kl[3])
    # Batching pairs per call is faster on some machines, equal only to rounding; the last call
    # of 2 + 2 + 1 pairs is filled up and trimmed.
    batched = nh.prompt_pair_offsets(model, a, b, c, pairs_per_call=2)
    np.testing.assert_allclose(batched.l2, whole.l2, rtol=1e-5, atol=1e-8)


def test_relative_and_kl_against_direct_computation(make_tiny):
    model = make_tiny()
    a, b, c = pairs(n=2, P=4, T=9)
    off = nh.prompt_pair_offsets(model, a, b, c, float64=True)
    with jax.enable_x64(True):
        state = jax.tree_util.tree_map(lambda x: x.astype(np.float64), nnx.state(model))
        m64 = nnx.merge(nnx.graphdef(model), state)
        out_a = m64(np.concatenate([a, c], 1))
        out_b = m64(np.concatenate([b, c], 1))
    h_a, h_b = np.asarray(out_a.hidden)[:, :, 4:], np.asarray(out_b.hidden)[:, :, 4:]
    mean_norm = 0.5 * (np.linalg.norm(h_a, axis=-1) + np.linalg.norm(h_b, axis=-1))
    np.testing.assert_allclose(off.relative, np.linalg.norm(h_a - h_b, axis=-1).transpose(1, 0, 2) / mean_norm.transpose(1, 0, 2)[:, :, :], rtol=1e-12, atol=0)

    def log_softmax(z):
        z = z - z.max(-1, keepdims=True)
        return z - np.log(np.exp(z).sum(-1, keepdims=True))

    lp_a, lp_b = (log_softmax(np.asarray(o.logits)[:, 4:]) for o in (out_a, out_b))
    kl = (np.exp(lp_a) * (lp_a - lp_b)).sum(-1)
    np.testing.assert_allclose(off.kl, kl, rtol=1e-10, atol=1e-15)
    assert np.all(off.kl > 0)


@pytest.mark.parametrize("scale", [1.0, 30.0])
def test_next_token_kl_matches_scipy_in_float64(scale):
    """The float32 KL against scipy's rel_entr on float64 softmaxes, for near and far pairs and for
    logits large enough that an unshifted exp would overflow."""
    from scipy.special import rel_entr, softmax

    rng = np.random.default_rng(1)
    za = scale * rng.standard_normal((3, 5, 4096))
    zb = za + np.array([1e-3, 0.1, 1.0])[:, None, None] * scale * rng.standard_normal(za.shape)
    za[0, 0, 7] = zb[0, 0, 7] = 100.0 * scale  # one dominant token in both
    got = np.asarray(next_token_kl(za.astype(np.float32), zb.astype(np.float32)))
    ref = rel_entr(softmax(za, -1), softmax(zb, -1)).sum(-1)
    # float32 logits of magnitude ~4 * scale carry rounding ~1e-7 * 4 * scale into the KL
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-6 * scale)
    assert np.sum(ref > 1e-4) >= 5  # not a test of zeros
    assert np.all(np.asarray(next_token_kl(za.astype(np.float32), za.astype(np.float32))) == 0)


@pytest.mark.parametrize("backend", ["cpu", "gpu"])
def test_streamed_kl_crosses_row_tiles_and_vocabulary_chunks_against_scipy(backend, monkeypatch):
    """More rows than one tile (on a CPU; all rows in one elsewhere) and a vocabulary of two whole
    chunks and a tail, with the largest logit of some rows only in a later chunk (the running
    maximum then grows and rescales)."""
    from scipy.special import rel_entr, softmax

    monkeypatch.setattr(jax, "default_backend", lambda: backend)

    rng = np.random.default_rng(2)
    vocab = 2 * offsets.KL_VOCAB_CHUNK + 123
    za = 3.0 * rng.standard_normal((2, offsets.KL_ROWS // 2 + 17, vocab))
    zb = za + 0.3 * rng.standard_normal(za.shape)
    za[0, :5, vocab - 3] = zb[0, :5, vocab - 4] = 40.0  # in the tail chunk
    za[1, :5, offsets.KL_VOCAB_CHUNK + 1] = 40.0  # in the second chunk, in a only
    got = np.asarray(next_token_kl(za.astype(np.float32), zb.astype(np.float32)))
    ref = rel_entr(softmax(za, -1), softmax(zb, -1)).sum(-1)
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-5)
    assert ref[0, :5].min() > 1 and ref[1, :5].min() > 1  # the planted tokens move the KL


def test_kl_of_a_large_untied_vocabulary_against_its_explicit_logits():
    """prompt_pair_offsets' KL, streamed over ``Transformer.unembed`` slices of an untied ``lm_head``
    (vocabulary of a chunk and a tail, 2 x 150 rows per run), against the model's whole logits
    in float64 numpy."""
    vocab = offsets.KL_VOCAB_CHUNK + 37
    cfg = nh.TransformerConfig(vocab_size=vocab, d_model=16, n_heads=2, n_layers=1, max_len=160, tied_embeddings=False,
                             init_std=0.5)  # logits of order 1: KLs of order 0.1, not 1e-8
    model = nh.Transformer(cfg, rngs=nnx.Rngs(0))
    a, b, c = pairs(n=2, P=4, T=150, vocab=vocab)
    off = nh.prompt_pair_offsets(model, a, b, c, float64=True, pairs_per_call=2)
    with jax.enable_x64(True):
        m64 = nnx.merge(nnx.graphdef(model), jax.tree_util.tree_map(lambda x: x.astype(np.float64), nnx.state(model)))
        z_a, z_b = (np.asarray(m64(np.concatenate([p, c], 1)).logits)[:, 4:] for p in (a, b))
    lp_a, lp_b = (z - np.logaddexp.reduce(z, axis=-1, keepdims=True) for z in (z_a, z_b))
    # float64 rounding of sums over 4133 logits of order 10: about 1e-14 (float32 would be 1e-6)
    np.testing.assert_allclose(off.kl, (np.exp(lp_a) * (lp_a - lp_b)).sum(-1), rtol=1e-10, atol=1e-12)
    assert np.all(off.kl > 0) and off.kl.max() > 0.1  # not a test of zeros


def test_shared_continuation_is_broadcast(make_tiny):
    model = make_tiny()
    a, b, c = pairs(n=3)
    shared = nh.prompt_pair_offsets(model, a, b, c[0])
    explicit = nh.prompt_pair_offsets(model, a, b, np.repeat(c[:1], 3, axis=0))
    np.testing.assert_array_equal(shared.l2, explicit.l2)


def test_unequal_prompts_only_without_absolute_positions(make_tiny, tiny_config):
    a, b, c = pairs(n=2, P=5)
    with pytest.raises(ValueError, match=r"unequal length \(P_a=5, P_b=4\)"):
        check_pairs(tiny_config, a, b[:, :4], c)
    rope = make_tiny(position="rope")
    off = nh.prompt_pair_offsets(rope, a, b[:, :4], c)
    assert off.l2.shape == (2, tiny_config.n_layers + 1, c.shape[1])


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda a, b, c: (a, b, c.astype(float)), "integer token ids"),
        (lambda a, b, c: (a, np.where(b == b[1, 2], 64, b), c), "token id 64 at index"),
        (lambda a, b, c: (a - a.max() - 1, b, c), "token id -"),
        (lambda a, b, c: (a, b[:1], c), "prompts_a has 2 pairs but prompts_b has 1"),
        (lambda a, b, c: (a, b, c[:1]), r"continuations must have shape \[T\] or \[n_pairs=2, T\]"),
        (lambda a, b, c: (a, b, np.zeros((2, 60), np.int32)), r"P \+ T = 65 exceeds the learned position table"),
        (lambda a, b, c: (a[0], b[0], c), r"prompts must have shape \[n_pairs, P\]"),
        (lambda a, b, c: (a[:0], b[:0], c[:0]), r"no prompt pairs: prompts of shape \(0, 5\)"),
        (lambda a, b, c: (a[:, :0], b[:, :0], c), r"with P >= 1"),
        (lambda a, b, c: (a, b, c[:, :0]), r"with T >= 1"),
    ],
)
def test_bad_input_is_named(change, match, tiny_config):
    a, b, c = pairs(n=2)
    with pytest.raises((ValueError, TypeError), match=match):
        check_pairs(tiny_config, *change(a, b, c))


def test_noise_floor_is_float32_sized(make_tiny, tiny_config):
    model = make_tiny()
    a, b, c = pairs(n=3, T=20)
    floor = nh.measure_noise_floor(model, a, b, c, n_pairs=2)
    off = nh.prompt_pair_offsets(model, a, b, c)
    assert floor.shape == (tiny_config.n_layers + 1, 20)
    assert np.all(floor[0] == 0)  # layer 0 is exactly zero in both precisions
    # Rounding error of float32 relative to the hidden-state scale: far below 1e-4, above 0.
    rel = floor[1:] / off.norm[:2, 1:].mean(0)
    assert rel.max() < 1e-5 and rel.max() > 0


def test_noise_floor_reuses_measured_offsets_exactly(make_tiny):
    model = make_tiny()
    a, b, c = pairs(n=3, T=20)
    off = nh.prompt_pair_offsets(model, a, b, c)
    np.testing.assert_array_equal(
        nh.measure_noise_floor(model, a, b, c, n_pairs=2, measured=off), nh.measure_noise_floor(model, a, b, c, n_pairs=2)
    )


class TestPureCoresUnderJitAndWithout(chex.TestCase):
    """The traceable cores give the same numbers jitted and not (``chex.variants``), against a float64
    numpy computation of the same definitions (docs/definitions.md#offsets)."""

    @chex.variants(with_jit=True, without_jit=True)
    def test_next_token_kl(self):
        rng = np.random.default_rng(3)
        za, zb = rng.normal(size=(2, 5, 11)) * 4
        pa = np.exp(za - za.max(-1, keepdims=True))
        pa /= pa.sum(-1, keepdims=True)
        pb = np.exp(zb - zb.max(-1, keepdims=True))
        pb /= pb.sum(-1, keepdims=True)
        want = np.sum(pa * (np.log(pa) - np.log(pb)), axis=-1)
        got = self.variant(next_token_kl)(jnp.asarray(za, jnp.float32), jnp.asarray(zb, jnp.float32))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)

    @chex.variants(with_jit=True, without_jit=True)
    def test_pair_offsets_is_the_distance_of_two_forward_passes(self):
        model = nh.Transformer(nh.TransformerConfig(vocab_size=64, d_model=32, n_heads=4, n_layers=2, max_len=32),
                               rngs=nnx.Rngs(0))
        a, b, c = (jnp.asarray(x) for x in nh.random_prompt_pairs(0, 2, 4, 12, 64))
        l2 = self.variant(functools.partial(pair_offsets, model))(a, b, c)[0]
        h_a = np.asarray(model(jnp.concatenate([a, c], 1)).hidden, np.float64)[:, :, 4:]
        h_b = np.asarray(model(jnp.concatenate([b, c], 1)).hidden, np.float64)[:, :, 4:]
        np.testing.assert_allclose(l2, np.moveaxis(np.linalg.norm(h_a - h_b, axis=-1), 0, 1), rtol=1e-5, atol=1e-6)

    def test_shape_bugs_are_caught_at_the_boundary(self):
        with self.assertRaises(AssertionError):
            next_token_kl(jnp.zeros((2, 5)), jnp.zeros((2, 6)))


def test_non_finite_parameters_are_named_before_any_work(make_tiny):
    model = make_tiny()
    kernel = model.blocks[1].mlp.up.kernel
    kernel[...] = kernel[...].at[0, 3].set(jnp.nan)
    with pytest.raises(ValueError, match=r"parameter blocks\.1\.mlp\.up\.kernel holds 1 non-finite values"):
        nh.prompt_pair_offsets(model, *nh.random_prompt_pairs(0, 1, 4, 8, 64))


def test_prepared_parameters_follow_every_change_of_the_model(make_tiny):
    """The engine keeps the last model's checked, stacked parameters: a parameter replaced after a
    measurement is seen by the next one (a new value changes the offsets; a NaN is named), and a
    second model of the same config is not confused with the first. An attribute changed with the
    same parameter arrays is seen too (it lives in the graphdef, taken fresh each call)."""
    model = make_tiny()
    pairs = nh.random_prompt_pairs(0, 1, 4, 8, 64)
    first = nh.prompt_pair_offsets(model, *pairs).l2
    np.testing.assert_array_equal(nh.prompt_pair_offsets(model, *pairs).l2, first)  # the kept entry
    model.set_attributes(implementation="bogus")
    with pytest.raises(ValueError, match="attention implementation 'bogus'"):
        nh.prompt_pair_offsets(model, *pairs)
    model.set_attributes(implementation="auto")
    other = make_tiny(seed=1)
    assert not np.array_equal(nh.prompt_pair_offsets(other, *pairs).l2, first)
    kernel = model.blocks[1].mlp.up.kernel
    kernel[...] = kernel[...] * 2
    assert not np.array_equal(nh.prompt_pair_offsets(model, *pairs).l2, first)
    kernel[...] = kernel[...].at[0, 3].set(jnp.inf)
    with pytest.raises(ValueError, match=r"parameter blocks\.1\.mlp\.up\.kernel holds 1 non-finite values"):
        nh.prompt_pair_offsets(model, *pairs)
    nh.prompt_pair_offsets(other, *pairs)
    assert offsets._LAST_PREPARED, "the last model's prepared parameters are kept"
    del other
    gc.collect()
    assert not offsets._LAST_PREPARED, "and dropped with the model"


def test_overflowing_activations_are_refused_with_the_layer_and_position(make_tiny):
    model = make_tiny(norm="rmsnorm")
    kernel = model.blocks[0].mlp.down.kernel
    kernel[...] = kernel[...] * 1e38  # finite weights, infinite MLP output
    with pytest.raises(ValueError, match=r"non-finite l2 offset at pair 0, layer 1, t = \d+"):
        nh.prompt_pair_offsets(model, *nh.random_prompt_pairs(0, 1, 4, 8, 64))


def test_kl_at_chosen_positions_is_the_full_curve_read_there(make_tiny):
    """The logits projected at the chosen positions only give the same KL there; l2 is untouched."""
    for model in (make_tiny(), make_tiny(position="rope")):  # rope: also prompts of unequal length
        a, b, c = nh.random_prompt_pairs(0, 2, 5, 50, 64)
        for prompts_b in (b, b[:, :3]) if model.config.position == "rope" else (b,):
            full = nh.prompt_pair_offsets(model, a, prompts_b, c)
            some = nh.prompt_pair_offsets(model, a, prompts_b, c, kl_positions="log")
            assert some.kl.shape == (2, some.kl_t.size) and some.kl_t.size < 50
            np.testing.assert_allclose(some.kl, full.kl[:, some.kl_t - 1], rtol=1e-5, atol=1e-7)
            np.testing.assert_array_equal(some.l2, full.l2)
            np.testing.assert_array_equal(full.kl_t, np.arange(1, 51))


def test_log_positions_are_dense_then_log_spaced_and_end_at_t():
    from nohair_jax.offsets import log_positions

    t = log_positions(1024)
    assert t[0] == 1 and t[-1] == 1024 and np.all(np.diff(t) > 0)
    np.testing.assert_array_equal(t[:32], np.arange(1, 33))
    assert 70 <= t.size <= 90  # 32 dense, then 32 per decade over 1.5 decades
    np.testing.assert_array_equal(log_positions(20), np.arange(1, 21))


@pytest.mark.parametrize("bad, match", [("lin", "None, 'log' or int"), ([0, 3], "1..12"), ([3, 2], "increasing"),
                                        ([1.5], "int positions")])
def test_bad_kl_positions_are_named(make_tiny, bad, match):
    with pytest.raises(ValueError, match=match):
        nh.prompt_pair_offsets(make_tiny(), *nh.random_prompt_pairs(0, 1, 4, 12, 64), kl_positions=bad)
