"""Sweeps: files and figures, agreement with prompt_pair_offsets, resume, stale cells, one program
for many seeds, four devices against one, and the command line."""

import dataclasses
import logging
import os
import shutil
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

import nohair_jax as nh
from nohair_jax import sweep
from nohair_jax.cli import main

GRID = nh.SweepGrid(depths=(1, 2), widths=(16,), prompt_lens=(4,), lengths=(48,), seeds=(0, 1), n_pairs=2,
                    fit_t_min=4, n_boot=50)
CLI_GRID = ["--widths", "16", "--prompt-lens", "4", "--lengths", "48", "--seeds", "2", "--pairs", "2",
            "--fit-t-min", "4", "--n-boot", "50"]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "grid"
    return out, nh.run_sweep(GRID, out, progress=False)


@pytest.fixture
def copy_of_swept(swept, tmp_path):
    out = tmp_path / "grid"
    shutil.copytree(swept[0], out)
    return out


@pytest.fixture
def measured_cells(monkeypatch):
    """The cells run_sweep actually measures (skipped ones are not listed)."""
    calls = []
    real = sweep.measure_cell

    def counting(cell, grid, **kwargs):
        calls.append(cell)
        return real(cell, grid, **kwargs)

    monkeypatch.setattr(sweep, "measure_cell", counting)
    return calls


def pairs_for(cell, grid=GRID):
    return nh.random_prompt_pairs(grid.pair_seed, grid.n_pairs, cell.prompt_len, cell.length, grid.vocab_size)


def test_sweep_writes_cells_summary_and_figures(swept):
    out, summary = swept
    assert [(r["depth"], len(r["fits"])) for r in summary["rows"]] == [(1, 1), (2, 2)]
    for name in ("manifest.json", "summary.json", "alpha_vs_depth.png", "alpha_vs_prompt_len.png", "offsets_vs_t.png"):
        assert (out / name).stat().st_size > 0, name
    for row in summary["rows"]:
        with np.load(out / "cells" / f"{row['key']}.npz") as data:
            assert data["l2"].shape == (2, 2, row["depth"] + 1, 48) and data["floor"].shape == (row["depth"] + 1, 48)
            # Anyone can refit the saved offsets (all seeds and pairs pooled) and get the reported alpha.
            for layer, fit in enumerate(row["fits"], start=1):
                refit = nh.fit_power_law(data["t"], data["l2"][:, :, layer].reshape(4, 48), floor=data["floor"][layer],
                                         t_min=4, n_boot=50)
                assert refit.alpha == pytest.approx(fit["alpha"], rel=1e-12)
        # The relay prediction is the relay model's alpha over the measured window: the model in
        # exact rational arithmetic here, the float recursion in the sweep.
        lo, hi = row["fits"][-1]["t_range"]
        curve = np.asarray(nh.relay.offsets_exact(4, 48, row["depth"], residual=True)[-1], dtype=float)
        expected = nh.fit_power_law(np.arange(1, 49), curve, t_min=lo, t_max=hi, n_boot=0).alpha
        assert row["relay_alpha"][-1] == pytest.approx(expected, rel=1e-12)
        assert len(row["seed_alpha"]) == 2 and all(len(a) == row["depth"] for a in row["seed_alpha"])


def test_every_seed_equals_prompt_pair_offsets_on_its_own_model():
    cell = GRID.cells()[1]
    models = sweep.cell_models(cell, GRID)
    pairs = pairs_for(cell)
    for batch_size in (1, 3):  # 3: four items padded to six
        for model, got in zip(models, nh.sweep_offsets(models, *pairs, batch_size=batch_size)):
            want = nh.prompt_pair_offsets(model, *pairs)
            for name in ("l2", "relative", "norm"):
                if batch_size == 1:  # one item at a time runs the per-pair computation: bit for bit
                    np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
                else:  # a batch of three may round differently, by float32 rounding of the hidden states
                    atol = 1e-6 * want.norm.max() if name == "l2" else 1e-6
                    np.testing.assert_allclose(getattr(got, name), getattr(want, name), rtol=1e-5, atol=atol, err_msg=name)
            # KL sums differences of nearly equal log-probabilities (about log 256 = 5.5 in size, so
            # rounded at 5.5 * 2^-24 = 3e-7), fused differently inside the bigger program: equal to
            # that rounding, not bit for bit, even one item at a time.
            np.testing.assert_allclose(got.kl, want.kl, rtol=0, atol=2e-6)


def test_blockwise_attention_runs_inside_the_sharded_program():
    """Long contexts take the blockwise path, a loop whose carry starts as a constant: it must
    trace inside shard_map and give the per-pair numbers."""
    cell = GRID.cells()[0]
    models = sweep.cell_models(cell, GRID)
    for model in models:
        model.set_attributes(implementation="blockwise", block_size=16)
    pairs = pairs_for(cell)
    for model, got in zip(models, nh.sweep_offsets(models, *pairs)):
        np.testing.assert_array_equal(got.l2, nh.prompt_pair_offsets(model, *pairs).l2)


def test_resume_after_interrupt_skips_finished_cells(swept, copy_of_swept, measured_cells, monkeypatch):
    out = copy_of_swept
    for path in (out / "cells").glob(f"{swept[1]['rows'][1]['key']}.*"):
        path.unlink()  # as if the first sweep had stopped before its second cell
    finished = {p.name: p.stat().st_mtime_ns for p in (out / "cells").iterdir()}
    counting = sweep.measure_cell

    def interrupted(cell, grid, **kwargs):
        if cell.depth == 2:
            raise KeyboardInterrupt  # and is stopped in the middle of that cell again
        return counting(cell, grid, **kwargs)

    monkeypatch.setattr(sweep, "measure_cell", interrupted)
    with pytest.raises(KeyboardInterrupt):
        nh.run_sweep(GRID, out, progress=False)
    assert {p.name: p.stat().st_mtime_ns for p in (out / "cells").iterdir()} == finished
    assert measured_cells == []  # the finished cell was not measured again

    monkeypatch.setattr(sweep, "measure_cell", counting)
    summary = nh.run_sweep(GRID, out, progress=False)
    assert [c.depth for c in measured_cells] == [2]  # only the interrupted cell is measured
    assert [r["fits"] for r in summary["rows"]] == [r["fits"] for r in swept[1]["rows"]]  # the same numbers
    nh.run_sweep(GRID, out, progress=False)
    assert [c.depth for c in measured_cells] == [2]  # and a finished sweep redoes nothing


def test_changed_setting_never_reuses_a_stale_cell(copy_of_swept, measured_cells):
    cell = GRID.cells()[0]
    key = sweep.cell_key(cell, GRID)
    assert sweep.cell_key(cell, dataclasses.replace(GRID, depths=(1,))) == key  # other cells do not matter
    for change in (dict(n_boot=60), dict(fit_t_min=5), dict(seeds=(0, 2)), dict(n_pairs=3), dict(pair_seed=2),
                   dict(floor_pairs=1), dict(vocab_size=128)):
        assert sweep.cell_key(cell, dataclasses.replace(GRID, **change)) != key, change
    nh.run_sweep(dataclasses.replace(GRID, depths=(1,), n_boot=60), copy_of_swept, progress=False)
    assert measured_cells == [cell]


def test_bad_grid_fails_before_writing_anything(tmp_path):
    with pytest.raises(ValueError, match="depths must hold ints >= 1"):
        nh.SweepGrid(depths=(0, 1))
    with pytest.raises(ValueError, match="rope needs an even head dimension"):
        nh.run_sweep(dataclasses.replace(GRID, widths=(16, 33), positions=("rope",)), tmp_path / "bad", progress=False)
    assert not (tmp_path / "bad").exists()


def test_sixteen_seeds_compile_one_program(caplog):
    cell = GRID.cells()[0]
    grid = dataclasses.replace(GRID, seeds=tuple(range(16)))
    models = sweep.cell_models(cell, grid)
    pairs = pairs_for(cell, grid)
    with jax.log_compiles(), caplog.at_level(logging.WARNING):
        nh.sweep_offsets(models, *pairs)
    named = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Compiling ")]
    assert sum("_stacked_call" in m for m in named) == 1, named
    # Sixteen other seeds of the same shape compile nothing at all.
    others = sweep.cell_models(cell, dataclasses.replace(grid, seeds=tuple(range(16, 32))))
    compiles = []
    count = lambda event, *_, **__: compiles.append(event) if event.endswith("backend_compile_duration") else None  # noqa: E731
    jax.monitoring.register_event_duration_secs_listener(count)
    try:
        nh.sweep_offsets(others, *pairs)
    finally:
        jax.monitoring.unregister_event_duration_listener(count)
    assert compiles == []


def test_four_devices_give_the_same_numbers_as_one(swept, tmp_path):
    row = swept[1]["rows"][0]  # measured on this process's single CPU device
    script = textwrap.dedent(f"""
        import sys
        import jax, numpy as np
        import nohair_jax as nh
        from nohair_jax import sweep
        assert jax.device_count() == 4, jax.devices()
        grid = nh.SweepGrid(**{GRID.to_dict()!r})
        cell = grid.cells()[0]
        pairs = nh.random_prompt_pairs(grid.pair_seed, grid.n_pairs, cell.prompt_len, cell.length, grid.vocab_size)
        offsets = nh.sweep_offsets(sweep.cell_models(cell, grid), *pairs)
        np.savez(sys.argv[1], l2=np.stack([o.l2 for o in offsets]), kl=np.stack([o.kl for o in offsets]))
    """)
    # The session's XLA flags (tests/conftest.py: the one-device run compiled with them), four devices.
    flags = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=flags)
    subprocess.run([sys.executable, "-c", script, str(tmp_path / "four.npz")], env=env, check=True, timeout=600)
    with np.load(tmp_path / "four.npz") as four, np.load(swept[0] / "cells" / f"{row['key']}.npz") as one:
        np.testing.assert_array_equal(four["l2"], one["l2"])
        np.testing.assert_array_equal(four["kl"], one["kl"])


def test_sweep_command_prints_alpha_and_resumes(swept, tmp_path, capsys, measured_cells):
    out = tmp_path / "cli"
    command = ["sweep", "--depths", "1,2", *CLI_GRID, "--out", str(out)]
    assert main(command) == 0
    printed = capsys.readouterr().out
    assert "sweeping 2 cells of 2 seeds x 2 pairs" in printed
    # The same grid as the fixture's, so the same cells with the same numbers.
    for row in swept[1]["rows"]:
        assert (out / "cells" / f"{row['key']}.json").exists()
        assert f"{row['fits'][-1]['alpha']:6.3f}" in printed
    # Run again: every cell is reused, none measured, the same alphas printed.
    assert len(measured_cells) == 2
    measured_cells.clear()
    assert main(command) == 0
    again = capsys.readouterr().out
    assert measured_cells == []
    assert all(f"{row['fits'][-1]['alpha']:6.3f}" in again for row in swept[1]["rows"])


def test_sweep_command_bad_value_is_one_line_and_no_files(tmp_path, capsys):
    out = tmp_path / "bad"
    assert main(["sweep", "--depths", "1", *CLI_GRID, "--widths", "33", "--positions", "rope", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "rope needs an even head dimension" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
    with pytest.raises(SystemExit) as exc:
        main(["sweep", "--bias", "on,maybe"])
    assert exc.value.code == 2
    assert "expected on, off or a gamma >= 0, got 'maybe'" in capsys.readouterr().err
