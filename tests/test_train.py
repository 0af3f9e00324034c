"""Training: config, schedule, batches, evaluation in closed form, learning, bit-identical resume."""

import dataclasses
import json
import math

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
from flax import nnx

import nohair_jax as nh
from nohair_jax import data
from nohair_jax import train as tr
from nohair_jax.fit import alphas, fit_layers

MODEL = nh.TransformerConfig(d_model=32, n_heads=4, n_layers=2, position="none")
TRAIN = tr.TrainConfig(
    steps=20, batch_size=8, context=32, lr=3e-3, warmup_steps=4, eval_every=10, eval_batches=2,
    checkpoint_every=10, log_every=5,
)
OFFSET_STEPS = (0, 10, 20)


@pytest.fixture(scope="module")
def corpus():
    return data.stdlib_corpus()


@pytest.fixture(scope="module")
def straight(corpus, tmp_path_factory):
    """One uninterrupted run, measuring offsets at init, halfway and at the end."""
    pairs = data.heldout_prompt_pairs(corpus, 0, 3, 8, 128)
    out = tmp_path_factory.mktemp("straight")
    callback = tr.offsets_callback(pairs, fit_kwargs={"n_boot": 20}, floor_pairs=1, save_dir=out / "curves")
    return tr.train(MODEL, TRAIN, corpus, out,
                    callbacks=[(OFFSET_STEPS, callback)], progress=False)


def params_of(model):
    return jax.tree.leaves(nnx.state(model))


def checkpoint_leaves(out_dir, step, item):
    return jax.tree.leaves(ocp.StandardCheckpointer().restore((out_dir / "checkpoints" / str(step) / item).absolute()))


def test_config_round_trips_through_json_and_is_validated():
    assert tr.TrainConfig.from_dict(json.loads(json.dumps(TRAIN.to_dict()))) == TRAIN
    with pytest.raises(ValueError, match="multiple of log_every"):
        dataclasses.replace(TRAIN, checkpoint_every=7)
    with pytest.raises(ValueError, match="warmup_steps"):
        dataclasses.replace(TRAIN, warmup_steps=20)
    with pytest.raises(ValueError, match="lr"):
        dataclasses.replace(TRAIN, lr=float("nan"))


def test_schedule_matches_the_formula():
    cfg = tr.TrainConfig(steps=100, warmup_steps=10, lr=2e-3, final_lr_fraction=0.1, checkpoint_every=50)
    lr = tr.lr_schedule(cfg)
    end = 2e-4
    cosine = lambda s: end + (2e-3 - end) * 0.5 * (1 + math.cos(math.pi * (s - 10) / 90))
    for step, want in [(0, 0.0), (5, 1e-3), (10, 2e-3), (40, cosine(40)), (100, end), (150, end)]:
        assert float(lr(step)) == pytest.approx(want, rel=1e-6, abs=1e-12)


def test_batches_are_a_pure_function_of_seed_and_step(corpus):
    a = tr.batch_windows(corpus.train, 3, 7, 4, 16)
    assert a.shape == (4, 17) and a.dtype == np.int32
    np.testing.assert_array_equal(a, tr.batch_windows(corpus.train, 3, 7, 4, 16))
    assert not np.array_equal(a, tr.batch_windows(corpus.train, 3, 8, 4, 16))
    assert not np.array_equal(a, tr.batch_windows(corpus.train, 4, 7, 4, 16))
    text = corpus.train.tobytes()
    assert all(text.find(row.tobytes()) % 4 == 0 for row in a)  # contiguous windows of the corpus


def test_uniform_model_scores_exactly_eight_bits_per_byte(corpus):
    model = nh.Transformer(MODEL, rngs=nnx.Rngs(0))
    graphdef, state = nnx.split(model)
    zero = nnx.merge(graphdef, jax.tree.map(np.zeros_like, state))  # zero logits: uniform over 256 bytes
    windows = tr.eval_windows(corpus.heldout, 32, 10)
    assert windows.shape == (10, 33)
    np.testing.assert_array_equal(windows[0], corpus.heldout[:33])
    np.testing.assert_array_equal(windows[-1], corpus.heldout[-33:])
    assert tr.bits_per_byte(zero, windows, batch_size=3) == pytest.approx(8.0, rel=1e-6)


def test_training_lowers_the_loss(straight):
    history = straight.history
    losses = [e["loss"] for e in history if "loss" in e]
    evals = [e["eval_bits_per_byte"] for e in history if "eval_bits_per_byte" in e]
    assert [e["step"] for e in history if "loss" in e] == [5, 10, 15, 20]
    assert [e["step"] for e in history if "eval_bits_per_byte" in e] == [0, 10, 20]
    assert evals[0] == pytest.approx(8.0, abs=0.1)  # near-uniform at init
    assert losses[-1] < losses[0] - 0.5 and evals[-1] < evals[0] - 1.0
    assert all(e["tokens_per_s"] > 0 for e in history if "loss" in e and e["step"] > 1)
    saved = nh.results.load_json(straight.out_dir / "history.json")["history"]
    assert [e["step"] for e in saved] == [e["step"] for e in history]


def test_offsets_callback_records_alpha_per_layer_including_init(straight):
    steps, alpha = tr.alpha_history(straight.history)
    np.testing.assert_array_equal(steps, OFFSET_STEPS)
    assert alpha.shape == (len(OFFSET_STEPS), MODEL.n_layers)
    for entry in straight.history:
        if "alpha" in entry:
            assert len(entry["offset_fits"]) == MODEL.n_layers
            # The saved curves are the ones the reported alpha was fitted to.
            with np.load(straight.out_dir / "curves" / f"offsets_step{entry['step']}.npz") as curves:
                assert curves["l2"].shape == (3, MODEL.n_layers + 1, 128)
                refit = fit_layers(curves["t"], curves["l2"], curves["floor"], n_boot=20)
                assert alphas(refit) == entry["alpha"]


def test_resume_is_bit_identical_to_an_uninterrupted_run(corpus, straight, tmp_path):
    class Interrupted(Exception):
        pass

    def crash(model, step):
        raise Interrupted  # after the checkpoint at step 10, before the one at 20

    with pytest.raises(Interrupted):
        tr.train(MODEL, TRAIN, corpus, tmp_path, callbacks={13: crash}, progress=False)
    # A fresh model and optimiser, restored from the step-10 checkpoint: the process-free restart.
    resumed = tr.train(MODEL, TRAIN, corpus, tmp_path, progress=False)

    for a, b in zip(params_of(resumed.model), params_of(straight.model), strict=True):
        assert np.array_equal(a, b)
    for item in ("params", "opt_state"):
        for a, b in zip(checkpoint_leaves(tmp_path, 20, item), checkpoint_leaves(straight.out_dir, 20, item), strict=True):
            assert np.array_equal(a, b)
    drop = {"tokens_per_s", "alpha", "offset_fits"}  # wall-clock, and the straight run's callback
    strip = lambda h: [{k: v for k, v in e.items() if k not in drop} for e in h]
    assert strip(resumed.history) == strip(straight.history)


def test_resume_false_starts_over(corpus, straight, tmp_path):
    with pytest.raises(ZeroDivisionError):
        tr.train(MODEL, TRAIN, corpus, tmp_path, callbacks={13: lambda m, s: 1 / 0}, progress=False)
    # Step 5 lies before the step-10 checkpoint: its callback runs only if training starts over.
    fresh = tr.train(MODEL, TRAIN, corpus, tmp_path, resume=False, callbacks={5: lambda m, s: {"ran": True}},
                     progress=False)
    assert [e.get("ran") for e in fresh.history if e["step"] == 5] == [True]
    for a, b in zip(params_of(fresh.model), params_of(straight.model), strict=True):
        assert np.array_equal(a, b)


def test_load_trained_restores_the_last_checkpoint(straight):
    loaded = tr.load_trained(straight.out_dir)
    assert loaded.config == MODEL
    for a, b in zip(params_of(loaded), params_of(straight.model), strict=True):
        assert np.array_equal(a, b)
    with pytest.raises(ValueError, match="no checkpoint at step 3"):
        tr.load_trained(straight.out_dir, step=3)


def test_resume_refuses_a_different_configuration(corpus, straight):
    with pytest.raises(ValueError, match="train.lr"):
        tr.train(MODEL, dataclasses.replace(TRAIN, lr=1e-3), corpus, straight.out_dir, progress=False)


def test_a_constant_rate_run_continues_to_more_steps_as_one_run(corpus, tmp_path):
    """With the rate constant after warm-up (``final_lr_fraction`` 1) no update depends on the total steps, so
    a run continued from 10 to 20 steps (training in stages, ``staged.train_to``) is the run trained straight
    to 20, bit for bit; a run whose cosine reaches its end at ``steps`` refuses more steps, naming them."""
    constant = dataclasses.replace(TRAIN, final_lr_fraction=1.0)
    tr.train(MODEL, dataclasses.replace(constant, steps=10), corpus, tmp_path / "staged", progress=False)
    staged = tr.train(MODEL, constant, corpus, tmp_path / "staged", progress=False)
    straight = tr.train(MODEL, constant, corpus, tmp_path / "straight", progress=False)
    for a, b in zip(params_of(staged.model), params_of(straight.model), strict=True):
        assert np.array_equal(a, b)
    import json

    saved = json.loads((tmp_path / "straight" / "config.json").read_text())  # the same run with the cosine, at 10
    saved["train"].update(final_lr_fraction=TRAIN.final_lr_fraction, steps=10)
    (tmp_path / "cosine").mkdir()
    (tmp_path / "cosine" / "config.json").write_text(json.dumps(saved))
    with pytest.raises(ValueError, match=r"differs in train.steps\)"):
        tr.train(MODEL, TRAIN, corpus, tmp_path / "cosine", progress=False)


def test_a_run_written_before_later_model_settings_existed_still_resumes(corpus, straight, tmp_path):
    """A config.json without the model settings added since (head_width, rotary_fraction, parallel_residual
    here) is the same run: their defaults keep the model it trained."""
    import json
    import shutil

    shutil.copytree(straight.out_dir, tmp_path / "run")
    path = tmp_path / "run" / "config.json"
    saved = json.loads(path.read_text())
    for key in ("head_width", "rotary_fraction", "parallel_residual"):
        del saved["model"][key]
    path.write_text(json.dumps(saved))
    resumed = tr.train(MODEL, TRAIN, corpus, tmp_path / "run", progress=False)
    for a, b in zip(params_of(resumed.model), params_of(straight.model), strict=True):
        assert np.array_equal(a, b)
    saved["model"]["d_mlp"] = 7  # a setting that differs is still refused
    path.write_text(json.dumps(saved))
    with pytest.raises(ValueError, match="model.d_mlp"):
        tr.train(MODEL, TRAIN, corpus, tmp_path / "run", progress=False)


def test_bad_inputs_are_refused(corpus, tmp_path):
    with pytest.raises(ValueError, match="outside the run's steps"):
        tr.train(MODEL, TRAIN, corpus, tmp_path, callbacks={21: lambda m, s: None}, progress=False)
    tiny = data.Corpus("tiny", "ten bytes", corpus.train[:10], corpus.heldout[:10])
    with pytest.raises(ValueError, match="context"):
        tr.train(MODEL, TRAIN, tiny, tmp_path, progress=False)


def test_offsets_callback_refuses_continuations_too_short_for_its_fit_window():
    """The fit window [32, T] needs T >= 76 (4 log bins of 8 per decade): shorter continuations are refused
    when the callback is made, in the fit's own words, not measured into an alpha of None at every step."""
    assert tr.shortest_fitted_length() == 76 and tr.unfitted(76) is None
    with pytest.raises(ValueError, match=r"continuations of 16 tokens leave no window to fit alpha on: need t_min < "
                                         r"t_max, got t_min = 32 and t_max = 16"):
        tr.offsets_callback(nh.random_prompt_pairs(0, 2, 4, 16, 256))
    with pytest.raises(ValueError, match=r"of 75 tokens .* holds 3 non-empty bins, fewer than min_bins = 4"):
        tr.offsets_callback(nh.random_prompt_pairs(0, 2, 4, 75, 256))
    tr.offsets_callback(nh.random_prompt_pairs(0, 2, 4, 16, 256), fit_kwargs={"t_min": 2})  # a window that fits


def test_one_optimizer_per_update_rule_so_seeds_and_stages_share_the_compiled_step():
    """The jitted step takes the optimizer as a static argument: a new object per seed or per stage of a run
    continued to more steps compiled the step again (two compilations per staged run, measured)."""
    constant = tr.TrainConfig(steps=40, warmup_steps=4, final_lr_fraction=1.0)
    same = [dataclasses.replace(constant, seed=3), dataclasses.replace(constant, steps=80, batch_size=2, eval_every=5)]
    assert all(tr.optimizer(cfg) is tr.optimizer(constant) for cfg in same)
    cosine = tr.TrainConfig(steps=40, warmup_steps=4)
    assert tr.optimizer(dataclasses.replace(cosine, seed=3)) is tr.optimizer(cosine)
    for changed in (dict(steps=80), dict(lr=1e-3), dict(warmup_steps=5), dict(weight_decay=0.0)):
        assert tr.optimizer(dataclasses.replace(cosine, **changed)) is not tr.optimizer(cosine), changed
    schedule = tr.lr_schedule(constant)
    assert [float(schedule(s)) for s in (0, 2, 4, 40, 79)] == pytest.approx([0, 1e-3, 2e-3, 2e-3, 2e-3], rel=1e-6)
