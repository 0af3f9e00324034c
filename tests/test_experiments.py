"""Every experiment script is a part of ``nohair reproduce``.

Their smoke profiles run end to end in tests/test_reproduce.py (the tiny reproduction profile),
which checks each part's summary and figures; the numbers of a smoke run mean nothing (tiny
models, a few pairs). An experiment outside ``reproduce`` would go unrun, so there is none.
"""

import inspect
from pathlib import Path

from nohair_jax import parts, reproduce

EXPERIMENTS = Path(__file__).parent.parent / "experiments"


def test_every_experiment_is_a_reproduce_part():
    assert {p.stem for p in EXPERIMENTS.glob("*.py")} - {"__init__"} == set(parts.part_names())
    assert [p.name for p in parts.find_parts()] == [p.name for p in sorted(parts.find_parts(), key=lambda p: p.order)]
    assert len({p.order for p in parts.find_parts()}) == len(parts.part_names())  # the report's order is unambiguous


def test_every_experiment_has_the_interface_reproduce_calls():
    for name in parts.part_names():
        module = parts.experiment(name)
        assert set(module.PROFILES) >= {"smoke", "quick", "full"}, name
        assert {"profile", "out", "settings"} <= set(inspect.signature(module.run).parameters), name


def test_uniform_attention_gives_the_prompt_exactly_its_diluted_share_and_the_bias_cancels_it():
    """experiments/dilution.py: zeroed queries make every logit 0, so the prompt's share of attention at
    continuation position t is P / (P + t); with the bias (gamma 1) it is (P + t) / (P + 2t) (closed forms)."""
    import jax.numpy as jnp
    import numpy as np

    import nohair_jax as nh
    from nohair_jax.experiments.dilution import uniform_model

    p = dict(prompt_len=4, length=28, d_model=32)
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 256, (1, 32)))
    t = np.arange(1, 29)
    for gamma, share in ((None, 4 / (4 + t)), (1.0, (4 + t) / (4 + 2 * t))):
        out = uniform_model(2, 0, gamma, p)(tokens, probe=nh.FirstKeysShare(keys=4))
        got = np.asarray(out.attention)[:, 0, :, 4:]  # [L, H, T] at the continuation
        np.testing.assert_allclose(got, np.broadcast_to(share, got.shape), rtol=1e-6)


def test_an_experiment_script_refuses_a_folder_another_process_writes(tmp_path):
    """The scripts hold their --out's lock as the nohair commands do: one line, exit 2, nothing
    written while another process holds it; then the same command runs and leaves no lock file."""
    import os
    import subprocess
    import sys

    from nohair_jax.results import LOCK_NAME, folder_lock

    out = tmp_path / "relay"
    command = [sys.executable, "-m", "nohair_jax.experiments.relay_model", "--profile", "smoke", "--out", str(out)]
    with folder_lock(out):
        done = subprocess.run(command, capture_output=True, text=True)
        assert done.returncode == 2, done.stderr[-2000:]
        assert f"is in use by another nohair process (pid {os.getpid()})" in done.stderr.strip().splitlines()[-1]
        assert "Traceback" not in done.stderr and [p.name for p in out.iterdir()] == [LOCK_NAME]
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (out / "summary.json").exists() and not (out / LOCK_NAME).exists()


def test_differences_between_conditions_measured_on_the_same_pairs_are_paired():
    """A part that compares two conditions on the same pairs (seeds, order) builds the difference's interval
    paired (``fit.paired_difference_or_refuse``). Every difference in the parts is such a one now: the real
    model's trained minus init too, since its init seeds are measured on the trained model's own pairs."""
    unpaired = {}
    for path in EXPERIMENTS.glob("*.py"):
        source = path.read_text()
        count = source.count("difference_or_refuse(") - source.count("paired_difference_or_refuse(")
        if count:
            unpaired[path.stem] = count
    assert unpaired == {}


def test_the_real_models_init_seeds_are_measured_on_texts_of_their_own():
    """experiments/real_model.py: the trained model's first pairs split across the init seeds in order: no
    prompt or continuation measured under two seeds, every pair measured at init also measured trained (the
    difference is paired); too few trained pairs for the seeds is an error naming both counts."""
    import numpy as np
    import pytest

    from nohair_jax.experiments.real_model import _init_pair_sets
    from nohair_jax.pairs import text_prompt_pairs

    text = np.arange(20_000)  # every cut of a stream of distinct tokens is its own text
    trained = text_prompt_pairs(text, 1, 16, 16, 512)
    p = dict(init_pairs=4, init_seeds=(0, 1, 2), n_pairs=16)
    sets = _init_pair_sets(trained, p)
    assert [s.continuations.shape for s in sets] == [(4, 512)] * 3
    for part in range(3):  # prompts a, prompts b, continuations
        starts = [tuple(x[part][:, 0]) for x in sets]
        assert len({*starts[0], *starts[1], *starts[2]}) == 12
        np.testing.assert_array_equal(np.concatenate([x[part] for x in sets]), trained[part][:12])
    with pytest.raises(ValueError, match="4 init seeds x 5 pairs need 20 .* n_pairs = 16"):
        _init_pair_sets(trained, dict(p, init_pairs=5, init_seeds=(0, 1, 2, 3)))


def test_a_shared_first_token_changes_prompt_b_alone():
    import numpy as np

    from nohair_jax.experiments.sinks import shared_first_token
    from nohair_jax.pairs import random_prompt_pairs

    pairs = random_prompt_pairs(0, 3, 5, 7, 100)
    a, b, c = shared_first_token(pairs)
    np.testing.assert_array_equal(b[:, 0], pairs.prompts_a[:, 0])
    np.testing.assert_array_equal(b[:, 1:], pairs.prompts_b[:, 1:])
    assert a is pairs.prompts_a and c is pairs.continuations and not np.array_equal(pairs.prompts_b[:, 0], b[:, 0])


def test_a_small_run_another_process_is_training_is_waited_for_then_read(tmp_path, monkeypatch):
    """``experiments.small_run``: a run's folder in use (another part trains it) is waited for, not trained
    twice side by side; the run's name holds the seed, the bias and a hash of its settings."""
    import threading
    import time

    from nohair_jax import experiments
    from nohair_jax.results import LOCK_NAME, folder_lock
    from nohair_jax import staged

    trained = []
    monkeypatch.setattr(staged, "train_until_levelled", lambda *args, **kwargs: trained.append(args[3]) or ("model", "verdict"))
    monkeypatch.setattr(experiments, "WAIT_S", 0.05)
    p = experiments.SMALL_TRAINING["smoke"]
    folder, *_ = experiments.small_run(tmp_path / "part", p, 0)
    assert folder.parent == tmp_path / experiments.SMALL_RUNS and folder.name.startswith("no_bias_seed0_")
    assert experiments.small_run(tmp_path / "part", p, 0, 1.0)[0].name.startswith("bias1_seed0_")
    assert experiments.small_run(tmp_path / "part", dict(p, lr=1e-3), 0)[0] != folder  # other settings, another run

    released = threading.Event()

    def hold():
        with folder_lock(folder):
            released.wait(0.5)

    holder = threading.Thread(target=hold)
    holder.start()
    while not (folder / LOCK_NAME).exists():
        pass
    trained.clear()
    start = time.perf_counter()
    assert experiments.small_run(tmp_path / "part", p, 0)[0] == folder
    assert time.perf_counter() - start >= 0.45 and trained == [folder]  # trained (here: read back) after the holder
    holder.join()


def test_the_two_training_parts_share_each_seeds_unbiased_run_at_every_profile(tmp_path):
    """trained_vs_untrained and logit_bias read one unbiased run per seed (``experiments.small_run_folder``):
    at every reproduction profile their settings name the same runs, the biased ones apart."""
    from nohair_jax import experiments

    for profile in parts.PROFILES:
        settings = {name: reproduce.part_config(name, profile)["settings"] for name in ("trained_vs_untrained", "logit_bias")}
        tvu, bias = settings["trained_vs_untrained"], settings["logit_bias"]
        assert tvu["seeds"] == bias["seeds"], profile
        for seed in tvu["seeds"]:
            shared = experiments.small_run_folder(tmp_path / "trained_vs_untrained", tvu, seed)
            assert shared == experiments.small_run_folder(tmp_path / "logit_bias", bias, seed), (profile, seed)
            assert shared != experiments.small_run_folder(tmp_path / "logit_bias", bias, seed, 1.0)
    assert reproduce.part_config("logit_bias", "full")["settings"]["seeds"] == [0, 1, 2]
