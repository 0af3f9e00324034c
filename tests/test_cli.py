"""`nohair offsets` end to end on a tiny model: files, consistency, clear errors."""

import contextlib
import json
import signal
import subprocess
import sys

import numpy as np
import pytest

import nohair_jax as nh
from nohair_jax.cli import main

TINY = ["--depth", "2", "--d-model", "32", "--heads", "2", "--prompt-len", "4", "--length", "200", "--pairs", "4", "--n-boot", "50"]


def test_offsets_command_writes_consistent_results(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["offsets", *TINY, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "alpha per layer" in printed
    saved = json.loads((out / "fit.json").read_text())
    assert saved["model"]["n_layers"] == 2 and saved["n_pairs"] == 4 and len(saved["fits"]) == 2
    assert (out / "offsets.png").stat().st_size > 10_000
    with np.load(out / "offsets.npz") as data:
        assert data["l2"].shape == (4, 3, 200) and data["floor"].shape == (3, 200)
        np.testing.assert_array_equal(data["t"], np.arange(1, 201))
        # Anyone can refit the saved offsets and get the reported alpha.
        for layer, fit in enumerate(saved["fits"], start=1):
            refit = nh.fit_power_law(data["t"], data["l2"][:, layer], floor=data["floor"][layer], n_boot=50)
            assert refit.alpha == pytest.approx(fit["alpha"], rel=1e-12)
            assert f"{fit['alpha']:6.3f}" in printed


def test_offsets_command_with_kl_at_log_positions(tmp_path):
    """--kl-at log: the KL only at log_positions(T), the offsets exactly those of the every-t run."""
    from nohair_jax.offsets import log_positions

    assert main(["offsets", *TINY, "--out", str(tmp_path / "every")]) == 0
    assert main(["offsets", *TINY, "--kl-at", "log", "--out", str(tmp_path / "log")]) == 0
    with np.load(tmp_path / "every" / "offsets.npz") as every, np.load(tmp_path / "log" / "offsets.npz") as log:
        np.testing.assert_array_equal(log["kl_t"], log_positions(200))
        assert log["kl"].shape == (4, log_positions(200).size)
        np.testing.assert_array_equal(log["l2"], every["l2"])
        np.testing.assert_allclose(log["kl"], every["kl"][:, log["kl_t"] - 1], rtol=1e-5, atol=1e-9)
    assert json.loads((tmp_path / "log" / "fit.json").read_text())["kl_positions"] == f"{log_positions(200).size} of 200 t"


def test_bad_value_is_one_clear_line_and_no_files(tmp_path, capsys):
    out = tmp_path / "bad"
    code = main(["offsets", *TINY, "--logit-bias", "nan", "--out", str(out)])
    assert code == 2
    err = capsys.readouterr().err
    assert "gamma must be finite, got nan" in err and "Traceback" not in err
    assert not out.exists()


def test_a_full_disk_leaves_the_previous_results_whole_and_says_so(tmp_path, capsys, monkeypatch):
    """ENOSPC (simulated) while a second run writes fit.json: one line naming the file, exit 2, and
    the first run's offsets.npz, fit.json and figure byte for byte, with no temporary file left."""
    import errno
    from pathlib import Path

    out = tmp_path / "run"
    assert main(["offsets", *TINY, "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    write_text = Path.write_text

    def full_disk(self, *args, **kwargs):
        if "fit.json" in self.name:
            raise OSError(errno.ENOSPC, "No space left on device", str(self))
        return write_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full_disk)
    capsys.readouterr()
    assert main(["offsets", *TINY, "--pair-seed", "7", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "No space left on device" in err and "fit.json" in err and err.count("\n") == 1 and "Traceback" not in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


# `nohair <argv[2:]>` with every file it writes limited to argv[1] bytes (RLIMIT_FSIZE, as a full quota would).
_LIMITED = """
import resource, signal, sys
from nohair_jax.cli import console
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing us
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))
sys.argv = ["nohair", *sys.argv[2:]]
console()
"""


@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ"), reason="file size limits are POSIX")
def test_a_file_size_limit_met_mid_write_leaves_the_previous_results_whole_and_says_so(tmp_path):
    """A real failing write, no simulation: offsets.npz needs more than the limit, fit.json less."""
    small = ["--depth", "2", "--d-model", "16", "--heads", "2", "--prompt-len", "4", "--length", "64", "--pairs", "2",
             "--n-boot", "20"]
    out, limit = tmp_path / "run", 4000
    assert main(["offsets", *small, "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert len(before["offsets.npz"]) > limit > len(before["fit.json"])
    done = subprocess.run([sys.executable, "-c", _LIMITED, str(limit), "offsets", *small,
                           "--pair-seed", "7", "--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == f"nohair offsets: error: File too large: {out / 'offsets.npz'}"
    assert "Traceback" not in done.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # byte for byte, and no temporary file


@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ"), reason="file size limits are POSIX")
@pytest.mark.parametrize("command, data, figure", [("offsets", ("offsets.npz", "fit.json"), "offsets.png"),
                                                   ("bound", ("bound.npz", "bound.json"), "bound.png")])
def test_the_figure_belongs_to_the_result_set(tmp_path, command, data, figure):
    """A limit the data and the fits fit under and the figure does not: the folder keeps the previous
    set whole (its figure too) or, fresh, holds nothing of the new one."""
    small = ["--depth", "2", "--d-model", "16", "--heads", "2", "--prompt-len", "4", "--length", "64", "--pairs", "2",
             "--n-boot", "20"] + (["--fit-t-min", "8"] if command == "offsets" else [])
    out = tmp_path / "run"
    assert main([command, *small, "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    limit = max(len(before[name]) for name in data) + 2000  # the new pair/seed's data may be a little larger
    assert len(before[figure]) > limit, (len(before[figure]), limit)
    for folder in (out, tmp_path / "fresh"):
        done = subprocess.run([sys.executable, "-c", _LIMITED, str(limit), command, *small, "--pair-seed", "7",
                               "--out", str(folder)], capture_output=True, text=True)
        assert done.returncode == 2, done.stderr[-2000:]
        assert done.stderr.strip().splitlines()[-1] == f"nohair {command}: error: File too large: {folder / figure}"
        assert "Traceback" not in done.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # byte for byte, the figure too
    assert not (tmp_path / "fresh").exists()  # a run that wrote nothing leaves no folder it made


@pytest.mark.parametrize("args, message", [
    (["--length", "99999999999"], "expected a whole number of magnitude below 2^31, got 99999999999"),
    (["--depth", "2000000000"], "GiB of memory"),  # its parameters alone exceed any machine's memory
])
def test_sizes_this_machine_cannot_hold_are_refused_before_any_work(tmp_path, capsys, args, message):
    out = tmp_path / "run"
    with pytest.raises(SystemExit) if "2^31" in message else contextlib.nullcontext():
        assert main(["offsets", *TINY, *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and not out.exists()


@pytest.mark.parametrize("argv, message", [
    (["train", "--measure-every", "-5"], "argument --measure-every: expected a whole number >= 0, got -5"),
    (["offsets", "--pair-seed", "-1"], "argument --pair-seed: expected a whole number >= 0, got -1"),
    (["sweep", "--n-boot", "-3"], "argument --n-boot: expected a whole number >= 0, got -3"),
])
def test_negative_counts_and_seeds_are_refused_by_option_name(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_a_fit_window_beyond_the_length_is_refused_before_the_measurement(tmp_path, capsys, monkeypatch):
    import nohair_jax.measurement as measurement

    monkeypatch.setattr(measurement, "measure", lambda *a, **k: pytest.fail("measured anyway"))
    out = tmp_path / "run"
    assert main(["offsets", *TINY, "--fit-t-min", "300", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == "nohair offsets: error: --fit-t-min 300 leaves no fit window in T = 200 continuation tokens"
    assert not out.exists() or not any(p.name != ".nohair.lock" for p in out.iterdir())


def test_argument_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["offsets", "--length", "0"])
    assert exc.value.code == 2
    assert "expected a whole number >= 1, got 0" in capsys.readouterr().err


def test_train_command_resumes_and_measures(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "--depth", "1", "--d-model", "16", "--heads", "2", "--context", "16", "--batch-size", "2",
            "--warmup", "2", "--eval-every", "4", "--checkpoint-every", "4", "--log-every", "2",
            "--measure-every", "4", "--length", "76", "--pairs", "2", "--prompt-len", "4", "--out", str(out)]
    assert main([*args, "--steps", "4"]) == 0
    assert main([*args, "--steps", "8"]) == 2  # a different run config in the same folder is refused
    assert "steps" in capsys.readouterr().err
    assert main([*args, "--steps", "4", "--keep-checkpoints", "0"]) == 0  # resumed: keeping more is not another run
    history = json.loads((out / "history.json").read_text())["history"]
    assert [e["step"] for e in history if "alpha" in e] == [0, 4]
    assert main([*args, "--steps", "8", "--fresh", "--keep-checkpoints", "0"]) == 0
    printed = capsys.readouterr().out
    assert "held-out bits per byte at step 8" in printed and "step      8:" in printed
    assert sorted(int(p.name) for p in (out / "checkpoints").iterdir()) == [4, 8]  # every one kept


def test_out_that_is_a_file_and_unwritable_paths_are_one_line_errors(tmp_path, capsys):
    target = tmp_path / "taken"
    target.write_text("not a folder")
    args = ["offsets", "--depth", "1", "--d-model", "32", "--heads", "1", "--length", "40", "--pairs", "2"]
    assert main([*args, "--out", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"nohair offsets: error: --out {str(target)!r} exists and is not a folder"
    assert target.read_text() == "not a folder"
    assert main([*args, "--out", str(target / "below")]) == 2  # a folder under a file
    err = capsys.readouterr().err.strip()
    assert err == f"nohair offsets: error: --out {str(target / 'below')!r} cannot be a folder: {str(target)!r} is a file"
    assert main([*args, "--out", ""]) == 2  # not the current folder
    assert capsys.readouterr().err.strip() == "nohair offsets: error: --out '' is empty: name a folder"
    long = tmp_path / ("x" * 300)
    assert main([*args, "--out", str(long)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("has a name of 300 bytes; this file system holds at most 255")


@pytest.mark.parametrize("code, heavy", [
    ("import nohair_jax.cli as c; c.build_parser().format_help()", ("jax", "flax", "optax", "orbax", "sympy", "matplotlib")),
    ("import nohair_jax as nh; nh.relay.offsets", ("flax", "optax", "orbax", "sympy", "matplotlib")),
    ("import nohair_jax.cli as c\ntry:\n    c.main(['reproduce', '--only', 'nonsense'])\nexcept SystemExit:\n    pass",
     ("jax", "flax", "matplotlib")),
    ("import nohair_jax.cli as c\nassert c.main(['dynamics', '--n', '1', '--out', '/nonexistent/never']) == 2",
     ("jax", "flax", "matplotlib")),
])
def test_help_and_the_relay_model_load_no_heavy_library(code, heavy):
    """``nohair --help`` and ``nh.relay`` import only what they use (the package's names load lazily), and a
    reproduction's unknown part and a bad particle-system size are refused before JAX loads."""
    import subprocess
    import sys

    probe = f"import sys\n{code}\nprint(sorted(m for m in {heavy!r} if m in sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "[]", loaded


def test_every_public_name_resolves():
    missing = [name for name in nh.__all__ if getattr(nh, name, None) is None]
    assert not missing
    # The probes of a real model and the chat form are at the top level, and each name is the object
    # of the module the stub (what editors and type checkers read) imports it from.
    assert {"linear_response", "sink_attention", "direct_relay_split", "chat_template", "measure_system_prompts"} <= set(nh.__all__)
    from nohair_jax.jacobian import linear_response

    assert nh.linear_response is linear_response
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        nh.not_a_name


def test_offsets_command_builds_the_architecture_contrasts(tmp_path):
    """--position alibi --sliding-window W --qk-norm reach the model: the saved config holds them, and a
    one-layer model's offsets are exactly 0 from t = W on (the prompt is out of the window)."""
    out = tmp_path / "run"
    assert main(["offsets", *TINY, "--depth", "1", "--position", "alibi", "--sliding-window", "6", "--qk-norm",
                 "--out", str(out)]) == 0
    model = json.loads((out / "fit.json").read_text())["model"]
    assert (model["position"], model["sliding_window"], model["qk_norm"]) == ("alibi", 6, True)
    with np.load(out / "offsets.npz") as data:
        assert (data["l2"][:, 1, 5:] == 0).all() and (data["l2"][:, 1, :5] > 0).all()


@pytest.mark.parametrize("error, caught", [
    (MemoryError(), True),
    (RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 9663676416 bytes."), True),
    (OverflowError("Python int too large to convert to C ssize_t"), True),
    (OverflowError("cannot fit 'int' into an index-sized integer"), True),
    (OverflowError("cannot convert float infinity to integer"), False),  # a bug, not a size
    (RuntimeError("something else broke"), False),
])
def test_only_sizes_the_machine_cannot_hold_become_too_large(monkeypatch, tmp_path, capsys, error, caught):
    """Memory and size overflows end in one line naming them; any other error keeps its traceback (an
    OverflowError from an infinite value once hid a bug behind "too large for this machine")."""
    import nohair_jax.cli as cli

    def fails(args):
        raise error

    monkeypatch.setattr(cli, "cmd_offsets", fails)
    argv = ["offsets", "--out", str(tmp_path / "out")]
    if caught:
        assert main(argv) == 2
        assert "too large for this machine" in capsys.readouterr().err
    else:
        with pytest.raises(type(error)):
            main(argv)


@pytest.mark.parametrize("command", ["offsets", "bound"])
def test_help_names_every_checkpoint_family_the_tables_load(command, capsys):
    """The --checkpoint help once named 3 of the 8 GGUF families: it now lists the families of the loaders'
    own tables (the family table, which imports no JAX; the GGUF reader's is built from it)."""
    import re

    from nohair_jax.checkpoints.families import ARCHITECTURES
    from nohair_jax.checkpoints.gguf_file import GGUF_ARCHITECTURES

    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    missing = [name for name in (*ARCHITECTURES, *GGUF_ARCHITECTURES) if not re.search(rf"\b{name}\b", text)]
    assert not missing, text


def test_a_length_beyond_the_checkpoints_context_names_it_and_the_length_that_fits(tmp_path, capsys):
    """The default --length 2048 on a model of 64 positions: one line naming the context and the longest
    --length that fits, read from config.json before any weight (there is none here)."""
    folder = tmp_path / "gpt2"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(
        {"model_type": "gpt2", "vocab_size": 300, "n_embd": 24, "n_layer": 1, "n_head": 3, "n_positions": 64}))
    out = tmp_path / "out"
    assert main(["offsets", "--checkpoint", str(folder), "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip() == (
        "nohair offsets: error: 16 prompt and 2048 continuation tokens (--length 2048) exceed the model's context of "
        "64 tokens; give --length 48 or less")
    assert main(["bound", "--checkpoint", str(folder), "--prompt-len", "64", "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "exceed the model's context of 64 tokens: the prompts alone fill it; give shorter prompts (--prompt-len)")
    assert not out.exists() or not any(p.name != ".nohair.lock" for p in out.iterdir())


def test_train_refuses_a_length_that_leaves_no_fit_window_before_any_work(tmp_path, capsys):
    """--length 16 once trained, fitted alpha on [32, 16], printed nan and exited 0."""
    out = tmp_path / "run"
    assert main(["train", "--depth", "1", "--d-model", "16", "--heads", "2", "--steps", "1", "--measure-every", "1",
                 "--length", "16", "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip() == (
        "nohair train: error: --length 16 leaves no window to fit alpha on (t in [32, T], at least 4 log bins of 8 "
        "per decade): give --length 76 or more, or no --measure-every")
    assert not out.exists() or not any(p.name != ".nohair.lock" for p in out.iterdir())
