"""nohair_jax.measurement: the one pipeline, against its parts called by hand, and its saved layout."""

import json

import numpy as np
import pytest

import nohair_jax as nh
from nohair_jax.fit import fit_from_dict


@pytest.fixture(scope="module")
def pairs():
    return nh.random_prompt_pairs(3, 3, 4, 40, 64)


def test_one_model_equals_its_parts_and_saves_what_it_measured(make_tiny, pairs, tmp_path):
    model = make_tiny(seed=1)
    m = nh.measure(model, pairs, floor_pairs=2, fit_kwargs=dict(t_min=4, n_boot=20))
    off = nh.prompt_pair_offsets(model, *pairs)
    floor = nh.measure_noise_floor(model, *pairs, n_pairs=2)
    for name in ("l2", "relative", "norm", "kl"):
        np.testing.assert_array_equal(getattr(m.offsets, name), getattr(off, name), err_msg=name)
    np.testing.assert_array_equal(m.floor, floor)
    assert list(m.fits) == nh.fit_layers(off.t, off.l2, floor, t_min=4, n_boot=20)
    assert m.n_models is None and m.floor_pairs == 2

    summary = m.save(tmp_path, meta=dict(note="x"))
    with np.load(tmp_path / "offsets.npz") as data:
        assert sorted(data) == sorted(["t", "l2", "relative", "kl", "kl_t", "norm", "prompt_len", "fit_window", "floor"])
        np.testing.assert_array_equal(data["l2"], off.l2)
        np.testing.assert_array_equal(data["fit_window"], nh.fit.fit_windows(m.fits))
    saved = json.loads((tmp_path / "fit.json").read_text())
    assert saved == summary and saved["meta"] == {"note": "x"} and saved["noise_floor"] == "float32 vs float64 on 2 pairs"
    assert [fit_from_dict(f) for f in saved["fits"]] == list(m.fits)
    assert (tmp_path / "offsets.png").stat().st_size > 0
    bare = tmp_path / "bare"
    assert m.save(bare, meta=dict(note="x"), figure=False) == summary
    assert sorted(p.name for p in bare.iterdir()) == ["fit.json", "offsets.npz"]


def test_float64_and_no_floor(make_tiny, pairs):
    model = make_tiny()
    m64 = nh.measure(model, pairs, float64=True, kl_positions="log", fit_kwargs=dict(t_min=4, n_boot=0))
    assert m64.floor is None and m64.floor_pairs == 0 and m64.offsets.l2.dtype == np.float64
    np.testing.assert_array_equal(m64.offsets.kl_t, nh.offsets.log_positions(40))
    assert "floor" not in nh.measure(model, pairs, floor_pairs=0, fit_kwargs=dict(t_min=4)).arrays()


def test_stacked_models_keep_a_model_axis_even_for_one(make_tiny, pairs):
    models = [make_tiny(seed=s) for s in (0, 1)]
    both = nh.measure(models, pairs, floor_pairs=1, fit_kwargs=dict(t_min=4, n_boot=0))
    assert both.n_models == 2 and both.arrays()["l2"].shape == (2, 3, 4, 40) and both.arrays()["kl"].shape == (2, 3, 40)
    for k, model in enumerate(models):
        # Each model's own l2, to float32 rounding: this 4-head model is not bit for bit (up to 2e-6
        # relative seen), as XLA compiles the stacked program differently; one head is (test_sweep).
        want = nh.prompt_pair_offsets(model, *pairs)
        np.testing.assert_allclose(both.per_model(both.offsets.l2)[k], want.l2, rtol=1e-5, atol=1e-6 * want.norm.max())
    # pooled fits: every model's pairs at once; the floor: the first model's
    assert list(both.fits) == nh.fit_layers(both.offsets.t, both.offsets.l2, both.floor, t_min=4, n_boot=0)
    np.testing.assert_array_equal(both.floor, nh.measure_noise_floor(models[0], *pairs, n_pairs=1, measured=both.offsets))
    one = nh.measure(models[:1], pairs, mesh=nh.sweep_mesh(), floor_pairs=1, fit_kwargs=dict(t_min=4, n_boot=0))
    assert one.n_models == 1 and one.arrays()["l2"].shape == (1, 3, 4, 40)
    with pytest.raises(ValueError, match="float64 and kl_positions"):
        nh.measure(models, pairs, float64=True)


def test_pool_is_every_measurement_concatenated_with_its_index_and_the_largest_floor(make_tiny):
    """``pool`` against doing it by hand: the pairs of both seeds in order, groups 0 then 1, the floor
    the larger of the two at every point, and the fits those give ``fit_layers`` with ``groups``."""
    pairs = nh.random_prompt_pairs(0, 3, 4, 40, 64)
    runs = [nh.measure(make_tiny(seed=s), pairs, fit_kwargs=dict(t_min=4, n_boot=50)) for s in (0, 1)]
    pooled = nh.pool(runs, t_min=4, n_boot=50)
    np.testing.assert_array_equal(pooled.l2, np.concatenate([runs[0].offsets.l2, runs[1].offsets.l2]))
    np.testing.assert_array_equal(pooled.groups, [0, 0, 0, 1, 1, 1])
    np.testing.assert_array_equal(pooled.floor, np.maximum(runs[0].floor, runs[1].floor))
    assert pooled.fits == tuple(nh.fit_layers(pooled.t, pooled.l2, pooled.floor, groups=pooled.groups, t_min=4, n_boot=50))
    assert nh.pool([runs[0]], t_min=4).fits == tuple(nh.fit_layers(runs[0].offsets.t, runs[0].offsets.l2, runs[0].floor,
                                                                       groups=np.zeros(3, int), t_min=4))


def test_fits_of_a_sliding_window_model_say_where_the_prompt_leaves_the_window(make_tiny, tmp_path):
    """A window of 8 on each of the 3 layers (Mistral's): layer l's offset is exactly 0 from t = 7 l + 1 on (each
    window reaches 7 positions further back). ``measure`` reads the window from the model: layer 1's fit on
    [2, 14] is refused for it (not "d is non-positive"), layers 2 and 3 are fitted but flagged for crossing
    t = 8, in fit.json, the fits table and the figure's legend."""
    from nohair_jax.cli import _fits_table
    from nohair_jax.figures import offsets_figure

    model = make_tiny(position="rope", sliding_window=8)
    m = nh.measure(model, nh.random_prompt_pairs(0, 2, 4, 24, 64), floor_pairs=0, fit_kwargs=dict(t_min=2, t_max=14, n_boot=0))
    l2 = m.offsets.l2
    for layer in (1, 2, 3):
        silent = 7 * layer + 1
        assert (l2[:, layer, silent - 2] > 0).all() and not l2[:, layer, silent - 1:].any(), layer
    assert m.fits[0] == nh.fit.FitRefused("the prompt is outside this layer's 8-token window from t = 8 on: its offset "
                                          "is exactly 0 there")
    caveat = ("the fit window [2, 14] crosses t = 8, where the prompt leaves this layer's 8-token window: from there on "
              "the layer sees the prompt only through earlier layers")
    assert [fit.caveat for fit in m.fits[1:]] == [caveat, caveat]
    summary = m.save(tmp_path, figure=False)
    assert [fit_from_dict(f) for f in json.loads((tmp_path / "fit.json").read_text())["fits"]] == list(m.fits)
    table = _fits_table(summary)
    assert table.count(f"but {caveat}") == 2 and "non-positive" not in table
    legend = offsets_figure(m.offsets.t, l2, list(m.fits), None).legends[0]
    assert sum(caveat in " ".join(text.get_text().split()) for text in legend.get_texts()) == 2
