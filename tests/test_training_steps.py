"""Measurements along training (``nohair_jax.training_steps``, ``nohair steps``) on a tiny model trained
here with checkpoints at three steps: every checkpoint's alpha, half-life and conditions against the
same numbers computed on that checkpoint alone by the engine and the fit directly; the command's
files; and every refusal in one line, exit 2, before any weight is read, with nothing written."""

import json
import shutil

import jax
import numpy as np
import pytest
from flax import nnx
from matplotlib.image import imread

import nohair_jax as nh
from nohair_jax import data
from nohair_jax import train as tr
from nohair_jax.bound import measure_conditions
from nohair_jax.cli import main
from nohair_jax.fit import fit_or_refuse
from nohair_jax.training_steps import draw_steps, past_training_context, plan_training_steps, step_in_name

MODEL = nh.TransformerConfig(d_model=32, n_heads=4, n_layers=2, position="none")
TRAIN = tr.TrainConfig(steps=12, batch_size=4, context=32, lr=3e-3, warmup_steps=2, eval_every=12, eval_batches=1,
                       checkpoint_every=4, log_every=2, keep_checkpoints=None)
STEPS = [4, 8, 12]
PAIRS = dict(n_pairs=3, prompt_len=8, length=96, pair_seed=1)
FIT = dict(fit_t_min=8, n_boot=50)
CLI = ["--pairs", "3", "--prompt-len", "8", "--length", "96", "--pair-seed", "1", "--fit-t-min", "8", "--n-boot", "50"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A training run folder with checkpoints at steps 4, 8 and 12."""
    out = tmp_path_factory.mktemp("run")
    tr.train(MODEL, TRAIN, data.stdlib_corpus(), out, progress=False)
    assert sorted(int(p.name) for p in (out / "checkpoints").iterdir() if p.name.isdigit()) == STEPS
    return out


@pytest.fixture(scope="module")
def alone(run):
    """Each checkpoint loaded alone, measured with the engine and the fits directly: step -> (alpha
    [L], intervals [L], half-life, largest logit per layer)."""
    pairs = nh.random_prompt_pairs(PAIRS["pair_seed"], PAIRS["n_pairs"], PAIRS["prompt_len"], PAIRS["length"],
                                   MODEL.vocab_size)
    expected = {}
    for step in STEPS:
        model = tr.load_trained(run, step=step)
        off = nh.prompt_pair_offsets(model, *pairs)
        floor = nh.measure_noise_floor(model, *pairs, n_pairs=2, measured=off)
        fits = [fit_or_refuse(off.t, off.l2[:, layer], floor=floor[layer], t_min=FIT["fit_t_min"], n_boot=FIT["n_boot"])
                for layer in range(1, MODEL.n_layers + 1)]
        expected[step] = dict(
            alpha=[f.alpha if isinstance(f, nh.PowerLawFit) else None for f in fits],
            ci=[list(f.ci) if isinstance(f, nh.PowerLawFit) else None for f in fits],
            half_life=nh.kl_half_life(off.kl, n_boot=FIT["n_boot"]).to_dict(),
            logit_bound=measure_conditions(model, *pairs).logit_bound.tolist(),
        )
    fitted = [a for e in expected.values() for a in e["alpha"] if a is not None]
    assert len(fitted) >= len(STEPS), "too few layers fitted for the comparison to mean anything"
    # Training changed the model between checkpoints: a step mapped to the wrong checkpoint would show.
    assert len({tuple(e["logit_bound"]) for e in expected.values()}) == len(STEPS)
    return expected


def _same_as_alone(row: dict, want: dict) -> None:
    assert row["alpha"] == pytest.approx(want["alpha"], rel=1e-12)
    assert [f.get("ci") for f in row["fits"]] == [pytest.approx(ci, rel=1e-12) if ci else None for ci in want["ci"]]
    assert row["kl_half_life"] == want["half_life"]  # the same KL curves: the same bits
    assert row["conditions"]["logit_bound"] == pytest.approx(want["logit_bound"], rel=1e-12)


def test_a_run_folder_expands_to_its_checkpoints_each_measured_as_alone(run, alone):
    with pytest.warns(UserWarning, match="run past the training context"):
        measured = nh.measure_training_steps([run], **PAIRS, **FIT)
    assert measured.steps == STEPS
    assert [r.checkpoint.step_from for r in measured.results] == ["run"] * 3
    assert [r.checkpoint.source for r in measured.results] == [str(run / "checkpoints" / str(s)) for s in STEPS]
    assert measured.alpha().shape == (3, MODEL.n_layers, 3)
    for result in measured.results:
        _same_as_alone(json.loads(json.dumps(nh.results.jsonable(result.to_dict()))), alone[result.step])
        assert isinstance(result.conditions, nh.BoundConditions)


def test_the_command_writes_steps_in_order_and_a_figure(run, alone, tmp_path, capsys):
    out = tmp_path / "steps"
    given = [str(run / "checkpoints" / str(s)) for s in (12, 4, 8)]  # out of order: sorted by step
    assert main(["steps", *given, *CLI, "--out", str(out)]) == 0
    printed, err = capsys.readouterr()
    assert "[3/3] step 12" in printed and "wrote" in printed
    # P + T = 104 tokens, past the run's training context of 32: warned in one line and recorded.
    warned = [line for line in err.splitlines() if line.startswith("nohair: warning:")]  # stderr has progress bars too
    assert warned == ["nohair: warning: P + T = 104 tokens run past the training context (32 tokens) of the "
                      "checkpoints at steps 4, 8, 12: positions beyond it were never trained on"]
    assert "steps 4, 8, 12: measured past the training context" in printed
    assert sorted(p.name for p in out.iterdir()) == ["steps.json", "steps.png"]
    saved = json.loads((out / "steps.json").read_text())
    assert saved["steps"] == STEPS and [row["step"] for row in saved["checkpoints"]] == STEPS
    assert saved["settings"]["length"] == 96 and saved["meta"]["sources"] == given
    assert saved["settings"]["past_training_context"] == STEPS
    assert [row["training_context"] for row in saved["checkpoints"]] == [TRAIN.context] * 3
    for row in saved["checkpoints"]:
        _same_as_alone(row, alone[row["step"]])
    png = out / "steps.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    height, width, _ = imread(png).shape
    assert width > 1000 and height > 700
    drawn = imread(png)
    png.unlink()
    assert draw_steps(out) == png and np.array_equal(imread(png), drawn)  # drawn again from steps.json alone


def test_text_pairs_are_cut_from_the_text_in_the_runs_bytes(run, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text(data.decode(data.stdlib_corpus().heldout[:4000]), encoding="utf-8")
    settings = dict(n_pairs=2, prompt_len=4, length=48, pair_seed=3)
    checkpoints = [run / "checkpoints" / "4", run / "checkpoints" / "12"]
    with pytest.warns(UserWarning, match="run past the training context"):  # P + T = 52, the run's context 32
        measured = nh.measure_training_steps(checkpoints, text=text.read_text(encoding="utf-8"), fit_t_min=8, n_boot=0,
                                             **settings)
    assert measured.settings["pairs"] == "cut from text, as UTF-8 bytes"
    pairs = nh.text_prompt_pairs(data.encode(text.read_text(encoding="utf-8")), 3, 2, 4, 48)
    model = tr.load_trained(run, step=12)
    off = nh.prompt_pair_offsets(model, *pairs)
    want = nh.kl_half_life(off.kl, n_boot=0)
    assert measured.results[1].half_life == want


def test_steps_are_read_from_names_and_tokenizers_compared(tmp_path):
    names = {"step8000": 8000, "pythia-70m-step143000.Q8_0": 143000, "global_step20": 20, "Step-5": 5,
             "step1000-deduped": 1000, "final": None, "mystep10": None, "stepping": None}
    assert {name: step_in_name(name) for name in names} == names
    with pytest.raises(ValueError, match="several steps"):
        step_in_name("step1-step2")
    same = _hf_folder(tmp_path / "step200", vocab_offset=0), _hf_folder(tmp_path / "step100", vocab_offset=0)
    planned = plan_training_steps([str(f) for f in same], seq_len=32)
    assert [(c.step, c.step_from) for c in planned] == [(100, "name"), (200, "name")]
    given = plan_training_steps([str(f) for f in same], steps=[7, 3])
    assert [(c.source, c.step, c.step_from) for c in given] == [(str(same[1]), 3, "given"), (str(same[0]), 7, "given")]
    # A folder without a tokenizer is compared by size; two with tokenizers are compared with each other.
    bare = _hf_folder(tmp_path / "step50", vocab_offset=0)
    (bare / "tokenizer.json").unlink()
    other = _hf_folder(tmp_path / "step300", vocab_offset=5)
    assert [c.step for c in plan_training_steps([str(bare), str(same[0])])] == [50, 200]
    with pytest.raises(ValueError, match=f"checkpoints '{same[0]}' and '{other}' do not share a vocabulary"):
        plan_training_steps([str(bare), str(same[0]), str(other)])


def _hf_folder(path, *, vocab_offset: int, vocab_size: int = 64):
    """A Hugging Face GPT-2 folder's config and tokenizer, and a weights file of one tensor (planning reads
    its header, no weight)."""
    from safetensors.numpy import save_file
    from tokenizers import Tokenizer, models

    path.mkdir()
    config = dict(model_type="gpt2", n_layer=2, n_head=2, n_embd=16, n_positions=256, vocab_size=vocab_size)
    (path / "config.json").write_text(json.dumps(config))
    save_file({"wte.weight": np.zeros((vocab_size, 16), np.float32)}, str(path / "model.safetensors"))
    vocab = {f"w{(i + vocab_offset) % vocab_size}": i for i in range(vocab_size)}
    Tokenizer(models.WordLevel(vocab, unk_token="w0")).save(str(path / "tokenizer.json"))
    return path


def _other_run(run, tmp_path, *, checkpoint: int | None = None, **model):
    """A copy of the run's config with ``model`` changed and one checkpoint folder, 20: empty (refused before
    it is read), or a copy of the run's ``checkpoint``."""
    other = tmp_path / "other_run"
    if checkpoint is None:
        (other / "checkpoints" / "20").mkdir(parents=True)
    else:
        shutil.copytree(run / "checkpoints" / str(checkpoint), other / "checkpoints" / "20")
    saved = json.loads((run / "config.json").read_text())
    saved["model"].update(model)
    (other / "config.json").write_text(json.dumps(saved))
    return other


def _run_copy(run, tmp_path, *, broken=None):
    """A copy of the run, with an empty step folder 20 or, ``broken="metadata"``, checkpoint 8's list of
    its parameters (orbax's params/_METADATA) cut short."""
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    if broken == "metadata":
        metadata = copy / "checkpoints" / "8" / "params" / "_METADATA"
        metadata.write_bytes(metadata.read_bytes()[:100])
    else:
        (copy / "checkpoints" / "20").mkdir()
    return copy


def _no_weights(folder):
    (folder / "model.safetensors").unlink()
    return folder


BAD = {
    "missing": (lambda run, tmp: [str(run), str(tmp / "nowhere")], "checkpoint '{tmp}/nowhere' does not exist"),
    "no step in the name": (lambda run, tmp: [str(run / "checkpoints" / "4"), str(_hf_folder(tmp / "final", vocab_offset=0))],
                            "checkpoint '{tmp}/final' has no training step in its name"),
    "vocabulary sizes": (lambda run, tmp: [str(run / "checkpoints" / "4"), str(_other_run(run, tmp, vocab_size=300))],
                         "do not share a vocabulary (vocabularies of 256 and 300 tokens)"),
    "tokenizers": (lambda run, tmp: [str(_hf_folder(tmp / "step1", vocab_offset=0)),
                                     str(_hf_folder(tmp / "step2", vocab_offset=1))],
                   "checkpoints '{tmp}/step1' and '{tmp}/step2' do not share a vocabulary (tokenizers of different "
                   "vocabularies, token 'w0' is id 0 and id 63)"),
    "bytes against a tokenizer": (lambda run, tmp: [str(run / "checkpoints" / "4"),
                                                    str(_hf_folder(tmp / "step9", vocab_offset=0, vocab_size=256))],
                                  "reads UTF-8 bytes, the other a tokenizer"),
    "one checkpoint": (lambda run, tmp: [str(run / "checkpoints" / "8")], "1 checkpoint given: a measurement along "
                       "training needs at least two"),
    "one step twice": (lambda run, tmp: [str(run / "checkpoints" / "4"), str(run / "checkpoints" / "8"),
                                         "--steps", "5,5"], "are both at step 5"),
    "one checkpoint twice": (lambda run, tmp: [str(run / "checkpoints" / "8"), str(run / "checkpoints" / "8")],
                             "checkpoint '{run}/checkpoints/8' is given twice: give each checkpoint once"),
    "one checkpoint twice at two steps": (
        lambda run, tmp: [str(run / "checkpoints" / "4"), str(run / "checkpoints" / ".." / "checkpoints" / "4"),
                          "--steps", "1,2"],
        "checkpoint '{run}/checkpoints/4' is given twice (as '{run}/checkpoints/4' and "
        "'{run}/checkpoints/../checkpoints/4'): give each checkpoint once"),
    "a run and its checkpoint": (lambda run, tmp: [str(run), str(run / "checkpoints" / "12")],
                                 "checkpoint '{run}/checkpoints/12' is given twice"),
    "widths": (lambda run, tmp: [str(run / "checkpoints" / "4"), str(_other_run(run, tmp, d_model=64))],
               "checkpoints '{run}/checkpoints/4' and '{tmp}/other_run/checkpoints/20' are not one network: d_model 32 "
               "and 64 (and head_width, d_mlp); along training only the weights may differ"),
    "architecture": (lambda run, tmp: [str(run / "checkpoints" / "4"), str(_other_run(run, tmp, norm="rmsnorm"))],
                     "are not one network: norm 'layernorm' and 'rmsnorm';"),
    "empty step folder": (lambda run, tmp: [str(_run_copy(run, tmp))],
                          "checkpoint folder '{tmp}/copy/checkpoints/20' holds no parameters (no params/_METADATA: "
                          "empty, or a save that never finished): remove it or leave it out"),
    "damaged step folder": (lambda run, tmp: [str(_run_copy(run, tmp, broken="metadata"))],
                            "checkpoint folder '{tmp}/copy/checkpoints/8' holds a damaged params/_METADATA"),
    "folder without weights": (lambda run, tmp: [str(_hf_folder(tmp / "step1", vocab_offset=0)),
                                                 str(_no_weights(_hf_folder(tmp / "step2", vocab_offset=0)))],
                               "checkpoint folder '{tmp}/step2' has no weights"),
    "steps for a run": (lambda run, tmp: [str(run), str(run / "checkpoints" / "4"), "--steps", "1,2"],
                        "holds 3 checkpoints, each at its own step"),
    "steps miscounted": (lambda run, tmp: [str(run / "checkpoints" / "4"), str(run / "checkpoints" / "8"),
                                           "--steps", "1"], "1 steps given for 2 checkpoints"),
    "fit window": (lambda run, tmp: [str(run), "--length", "96", "--fit-t-min", "96"],
                   "--fit-t-min 96 leaves no fit window in T = 96"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_line_exit_2_and_nothing_written(case, run, tmp_path, capsys, monkeypatch):
    import nohair_jax.training_steps as ts

    monkeypatch.setattr(tr, "load_trained", lambda *a, **k: pytest.fail("a checkpoint was loaded"))
    monkeypatch.setattr(ts, "load_model", lambda *a, **k: pytest.fail("a checkpoint was loaded"))
    build, message = BAD[case]
    out = tmp_path / "out"
    argv = build(run, tmp_path)
    if "--length" not in argv:
        argv += ["--length", "96"]
    assert main(["steps", *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("nohair steps: error: ") and "Traceback" not in err
    assert message.format(tmp=tmp_path, run=run) in err
    assert not out.exists()


def test_one_network_is_its_computation_not_its_init_nor_defaults_written_out(run, tmp_path):
    # Another run of the same network: drawn at init with another scale, its MLP width written out.
    other = _other_run(run, tmp_path, checkpoint=4, init_std=0.05, d_mlp=4 * MODEL.d_model)
    planned = plan_training_steps([run / "checkpoints" / "8", other])
    assert [(c.step, c.context) for c in planned] == [(8, TRAIN.context), (20, TRAIN.context)]


def test_the_training_context_is_warned_where_the_measurement_runs_past_it(run):
    planned = plan_training_steps([run / "checkpoints" / "4", run / "checkpoints" / "8"])
    assert past_training_context(planned, TRAIN.context) is None
    assert past_training_context(planned, TRAIN.context + 1) == (
        "P + T = 33 tokens run past the training context (32 tokens) of the checkpoints at steps 4, 8: positions "
        "beyond it were never trained on")


def test_a_run_expands_to_the_checkpoints_it_keeps(run, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    shutil.rmtree(copy / "checkpoints" / "8")
    planned = plan_training_steps([copy])
    assert [c.step for c in planned] == [4, 12]


def test_a_runs_checkpoint_given_another_step_loads_the_checkpoint_it_names(run):
    # --steps relabels a run's checkpoints; the weights still come from the folder named.
    planned = plan_training_steps([run / "checkpoints" / "4", run / "checkpoints" / "8"], steps=[100, 200])
    assert [(c.step, c.step_from) for c in planned] == [(100, "given"), (200, "given")]
    for c, on_disk in zip(planned, (4, 8)):
        loaded, want = jax.tree.leaves(nnx.state(c.load())), jax.tree.leaves(nnx.state(tr.load_trained(run, step=on_disk)))
        assert all(np.array_equal(a, b) for a, b in zip(loaded, want))
