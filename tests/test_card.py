"""`nohair card`: a prompt-memory card on a tiny checkpoint of every family the project loads, its schema,
its numbers against independent computations, `--compare`, and bad input in one line.

Every family of ``checkpoints.families.ARCHITECTURES`` is built tiny with transformers (2 layers, 3 heads of
8 features, a 300-token vocabulary), saved as a Hugging Face folder with a byte-level tokenizer and a chat
template, and carded through the command line with a small protocol (``SMALL``: 3 pairs, T = 40; the real
protocol's 16 pairs at T = 512 are measured on SmolLM2 in docs/cards/). The windows are read back against
transformers' own ``layer_types``; alpha and the KL's half-life against a refit of offsets measured here; the
first key's share against the closed form of pure dilution (GPT-2 with its query weights zeroed).
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

import nohair_jax as nh  # noqa: E402
from nohair_jax import card as cards  # noqa: E402
from nohair_jax.checkpoints import load_tokenizer  # noqa: E402
from nohair_jax.checkpoints.families import ARCHITECTURES  # noqa: E402
from nohair_jax.cli import main  # noqa: E402
from families import CHATML, FAMILIES, NO_SYSTEM, WITH_BOS  # noqa: E402
from gguf_writer import bytes_to_unicode  # noqa: E402

SMALL = cards.Protocol(prompt_text=6, length=40, n_pairs=3, fit_t_min=4, n_boot=100, relay_pairs=2, condition_pairs=1,
                       sink_pairs=2)
SPECIAL = ("<|im_start|>", "<|im_end|>", "<bos>")


def test_the_table_covers_every_family_the_project_loads():
    assert sorted(FAMILIES) == sorted(ARCHITECTURES)


def _tokenizer(folder, bos: bool, template) -> None:
    """A byte-level BPE (the 256 bytes, one merge: a space joined to a following "Q"), three special tokens, and
    tokenizer_config.json with the chat template and whether to add the BOS."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    chars = bytes_to_unicode()
    vocab = {chars[b]: b for b in range(256)} | {"ĠQ": 256}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[("Ġ", "Q")]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(list(SPECIAL))
    tokenizer.save(str(folder / "tokenizer.json"))
    config = dict(bos_token="<bos>", eos_token="<|im_end|>", add_bos_token=bos)
    if template is not None:
        config["chat_template"] = template
    (folder / "tokenizer_config.json").write_text(json.dumps(config))


def _build(family: str, folder):
    row = FAMILIES[family]
    config = row.hf_config()
    torch.manual_seed(0)
    model = getattr(transformers, row.model_class)(config)
    with torch.no_grad():
        for p in model.parameters():  # norm scales are ones and biases zeros until perturbed
            p.add_(0.1 * torch.randn_like(p))
        if family == "gpt2":  # the query third of c_attn: every attention logit exactly 0, pure dilution
            for block in model.transformer.h:
                block.attn.c_attn.weight[:, :24] = 0
                block.attn.c_attn.bias[:24] = 0
    model.eval().save_pretrained(folder)
    _tokenizer(folder, row.adds_bos, row.template)
    return config


@pytest.fixture(scope="module")
def carded(tmp_path_factory):
    """family -> (its folder, transformers config, card.json contents, what the command printed), each made
    once through `nohair card` with the protocol ``SMALL``."""
    made = {}

    def get(family: str):
        if family not in made:
            folder = tmp_path_factory.mktemp(family)
            config = _build(family, folder)
            out = folder / "card"
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(cards, "PROTOCOL", SMALL)
                import contextlib
                import io

                printed = io.StringIO()
                with contextlib.redirect_stdout(printed):
                    assert main(["card", str(folder), "--out", str(out)]) == 0
            made[family] = (folder, config, json.loads((out / "card.json").read_text()), printed.getvalue())
        return made[family]

    return get


def _expected_windows(config) -> list[int | None]:
    """Each layer's window as transformers' config states it (its layer_types, else a window on every layer)."""
    window, n = getattr(config, "sliding_window", None), config.num_hidden_layers
    types = getattr(config, "layer_types", None)
    if types is not None:
        return [window if kind == "sliding_attention" else None for kind in types]
    return [window] * n


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_card_runs_on_a_tiny_model_of_every_family(carded, family):
    folder, config, card, printed = carded(family)
    assert cards.check_card(card) is card and card["schema_version"] == cards.SCHEMA_VERSION
    assert card["model"]["family"] == family and card["protocol"] == SMALL.to_dict()
    assert card["n_layers"] == 2 and [layer["layer"] for layer in card["layers"]] == [1, 2]
    for name in ("card.md", "card.png"):
        assert (folder / "card" / name).stat().st_size > 1000, name
    assert not [p.name for p in (folder / "card").iterdir() if p.name.startswith(".")], "temporary files left"
    # Provenance: every file read, hashed.
    assert set(card["model"]["sha256"]) == {"config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"}
    # The window per layer, and the reach it gives, against transformers' config.
    windows = _expected_windows(config)
    assert [layer["window"] for layer in card["layers"]] == windows
    reach = [None if windows[0] is None else windows[0] - 1]
    reach.append(None if None in windows[:2] else sum(w - 1 for w in windows[:2]))
    assert [layer["reach"] for layer in card["layers"]] == reach
    # P and T as stated: the chat form's opening, then the protocol's text; T in all.
    form = card["chat_form"]
    assert form["prompt_len"] == len(form["head"]) + SMALL.prompt_text and form["length"] == SMALL.length
    template, bos = FAMILIES[family].template, FAMILIES[family].adds_bos
    tokenizer = load_tokenizer(folder)
    if bos or template == WITH_BOS:
        assert form["head"][0] == tokenizer.token_to_id("<bos>") and form["head"].count(tokenizer.token_to_id("<bos>")) == 1
    else:
        assert tokenizer.token_to_id("<bos>") not in form["head"]
    expected = {None: ("raw", "", "\n\n"), CHATML: ("template", "<|im_start|>system\n", "<|im_end|>\n<|im_start|>user\n"),
                WITH_BOS: ("template", "<bos><|im_start|>system\n", "<|im_end|>\n<|im_start|>user\n"),
                NO_SYSTEM: ("folded", "<bos>[INST]", "\n\n")}[template]  # the space joined to the stand-in is left out
    assert (form["kind"], form["head_text"].removeprefix("<bos>") if bos and template != NO_SYSTEM else form["head_text"],
            form["mid_text"]) == (expected[0], expected[1], expected[2])
    # The relay where its derivation holds (pre-LN, sequential), and why not elsewhere.
    pre_ln = FAMILIES[family].pre_ln
    assert card["relay"]["applies"] == pre_ln
    if not pre_ln:
        assert "pre-LN" in card["relay"]["reason"] and all(layer["relay_alpha"] is None for layer in card["layers"])
    # The theorem's four conditions, the window's failing exactly where a window is shorter than the sequence.
    checked = {c["asks"]: c["holds"] for c in card["conditions"]["checked"]}
    assert len(checked) == 4 and checked["attention over every earlier key"] == all(w is None for w in windows)
    assert f"{card['n_layers']} layers, P = {form['prompt_len']}, T = {SMALL.length}" in printed
    assert "next-token KL: peak" in printed and "wrote" in printed


def test_alpha_and_the_kl_half_life_equal_refits_of_offsets_measured_here(carded):
    """The card's pairs rebuilt from the corpus by hand, their offsets measured again with
    ``prompt_pair_offsets``, alpha refitted per layer on the card's window and the half-life recomputed."""
    folder, _, card, _ = carded("llama")
    model, tokenizer = nh.load_checkpoint(folder)
    form = card["chat_form"]
    text = nh.tokenize(tokenizer, nh.decode(nh.stdlib_corpus().heldout))
    rng = np.random.default_rng(SMALL.pair_seed)  # text_prompt_pairs' cuts: a, b, then the continuations
    text_len = SMALL.length - len(form["mid"])
    starts = [rng.integers(0, text.size - size + 1, SMALL.n_pairs) for size in (SMALL.prompt_text,) * 2 + (text_len,)]
    a, b = (np.stack([np.concatenate([form["head"], text[s:s + SMALL.prompt_text]]) for s in side]) for side in starts[:2])
    c = np.stack([np.concatenate([form["mid"], text[s:s + text_len]]) for s in starts[2]])
    pairs = cards.card_pairs(tokenizer, cards.chat_form(tokenizer, nh.chat_template(folder)), SMALL)
    for ours, theirs in zip((a, b, c), pairs):
        np.testing.assert_array_equal(ours, theirs)
    off = nh.prompt_pair_offsets(model, a, b, c, kl_positions="log")
    for layer in card["layers"]:
        if layer["alpha"] is None:
            continue
        lo, hi = layer["fit_window"]
        fit = nh.fit_power_law(off.t, off.l2[:, layer["layer"]], t_min=lo, t_max=hi, n_boot=SMALL.n_boot)
        assert layer["alpha"] == pytest.approx(fit.alpha, abs=1e-9)
        assert layer["alpha_ci"] == pytest.approx(list(fit.ci), abs=1e-9)
    assert any(layer["alpha"] is not None for layer in card["layers"])
    assert card["kl"]["text_from"] == max(len(form["mid"]), 1)  # the KL before it predicts the turn tokens
    on_text = off.kl_t >= card["kl"]["text_from"]
    half = nh.kl_half_life(off.kl[:, on_text], t=off.kl_t[on_text], threshold=SMALL.kl_threshold,
                           n_boot=SMALL.n_boot).to_dict()
    assert card["kl"]["half_life"].keys() == half.keys()
    for key, value in half.items():
        assert card["kl"]["half_life"][key] == (value if value is None else pytest.approx(value, rel=1e-12)), key
    np.testing.assert_allclose(card["kl"]["per_pair"], off.kl, rtol=1e-6, atol=1e-9)


def test_under_pure_dilution_the_first_key_gets_its_closed_form_share_and_no_sink(carded):
    """GPT-2 with every query weight 0: each query i reads every key with weight 1 / (i + 1), so the first key's
    share over the queries from N // 2 on is the mean of 1 / (i + 1) there, in every layer."""
    _, _, card, _ = carded("gpt2")
    n = card["chat_form"]["prompt_len"] + card["chat_form"]["length"]
    closed = np.mean(1.0 / (np.arange(n // 2, n) + 1.0))
    assert card["sinks"]["dilution_share"] == pytest.approx(closed, rel=1e-12)
    for layer in card["layers"]:
        assert layer["sink_share"] == pytest.approx(closed, rel=1e-5) and not layer["sink"]
    assert card["sinks"]["layers_above"] == 0 and card["relay"]["applies"]


def test_the_window_ends_the_offsets_where_the_card_says_its_reach_ends(carded):
    """Mistral's window on every layer: past a layer's reach no token of the prompt can reach it, so the
    offsets measured here are exactly 0 from t = reach + 1 on, and not before."""
    folder, _, card, _ = carded("mistral")
    model, tokenizer = nh.load_checkpoint(folder)
    pairs = cards.card_pairs(tokenizer, cards.chat_form(tokenizer, nh.chat_template(folder)), SMALL)
    l2 = nh.prompt_pair_offsets(model, *pairs).l2
    for layer in card["layers"]:
        reach = layer["reach"]
        assert reach == layer["layer"] * 15 and reach < SMALL.length
        assert (l2[:, layer["layer"], reach:] == 0).all() and (l2[:, layer["layer"], :reach] > 0).all()


def test_compare_lays_cards_side_by_side_and_refuses_another_schema_or_protocol(carded, tmp_path, capsys):
    names = []
    for family in ("llama", "gemma3_text"):
        folder, _, card, _ = carded(family)
        names.append(str(folder / "card" / "card.json"))
    out = tmp_path / "compared"
    assert main(["card", "--compare", *names, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    table = (out / "compare.md").read_text()
    assert table in printed and (out / "compare.png").stat().st_size > 1000
    header, rule, *rows = table.splitlines()
    assert all(name in header for name in names) and rule == "|---|---|---|"
    alpha_row = next(row for row in rows if row.startswith("| alpha, last layer"))
    for name in names:
        last = json.loads(open(name).read())["layers"][-1]
        assert f"{last['alpha']:.2f}" in alpha_row
    assert "| sliding window | none: every layer reads every earlier key | 16 tokens on 1 of 2 layers |" in table

    old = json.loads(open(names[0]).read())
    old["schema_version"] = 99
    (tmp_path / "old.json").write_text(json.dumps(old))
    other = json.loads(open(names[1]).read())
    other["protocol"]["length"] = 512
    (tmp_path / "other.json").write_text(json.dumps(other))
    for bad, says in ((tmp_path / "old.json", "has schema_version 99; this nohair reads version 1"),
                      (tmp_path / "other.json", "was made with protocol length = 512")):
        assert main(["card", "--compare", names[0], str(bad), "--out", str(tmp_path / "never")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("nohair card: error: ") and says in err, err
        assert not (tmp_path / "never").exists()


def test_a_card_that_is_not_of_this_schema_is_refused_before_jax_loads(carded, tmp_path):
    folder, _, card, _ = carded("llama")
    (tmp_path / "old.json").write_text(json.dumps(dict(card, schema_version=0)))
    probe = ("import sys\nimport nohair_jax.cli as c\n"
             f"assert c.main(['card', '--compare', {str(folder / 'card' / 'card.json')!r}, {str(tmp_path / 'old.json')!r}, "
             f"'--out', {str(tmp_path / 'never')!r}]) == 2\n"
             "print(sorted(m for m in ('jax', 'flax', 'matplotlib') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]" and "schema_version 0" in done.stderr


@pytest.mark.parametrize("damage, says", [
    (lambda card: card.pop("layers"), "has no field 'layers'"),
    (lambda card: card["layers"][1].update(alpha="fast"), "layer 2: field 'alpha' must be number|null, got str"),
    (lambda card: card.update(n_layers=3), "2 layer records for n_layers = 3"),
])
def test_the_schema_names_what_a_damaged_card_lacks(carded, damage, says):
    _, _, card, _ = carded("llama")
    broken = json.loads(json.dumps(card))
    damage(broken)
    with pytest.raises(ValueError, match=says.replace("|", r"\|")):
        cards.check_card(broken)


def test_every_field_of_the_schema_is_documented():
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "card.md").read_text()
    documented = set(re.findall(r"^\| `(\w+)` \|", doc, flags=re.M))
    assert set(cards.CARD_FIELDS) | set(cards.LAYER_FIELDS) <= documented, \
        sorted(set(cards.CARD_FIELDS) | set(cards.LAYER_FIELDS) - documented)
    assert f"schema_version {cards.SCHEMA_VERSION}" in doc or f"version {cards.SCHEMA_VERSION}" in doc


def _one_line_error(argv, capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_bad_command_lines_fail_in_one_line_and_write_nothing(carded, tmp_path, capsys):
    out = str(tmp_path / "never")
    card = str(carded("llama")[0] / "card" / "card.json")
    bare = carded("gpt2")[0]  # a folder without tokenizer.json: the card's prompts are text
    capsys.readouterr()  # the progress of the cards made here, where this test is the first to ask for them
    for argv, says in (
        (["card", "--out", out], "give a CHECKPOINT to make its card, or --compare"),
        (["card", "smollm2-135m", "--compare", card, card, "--out", out], "give a CHECKPOINT to make its card, or --compare"),
        (["card", "--compare", card, "--out", out], "--compare sets two or more cards side by side, got 1"),
        (["card", "--compare", card, str(tmp_path / "missing.json"), "--out", out], "cannot read the card"),
        (["card", str(tmp_path / "no_such_model"), "--out", out], "does not exist"),
    ):
        assert says in _one_line_error(argv, capsys)
    (tmp_path / "text.json").write_text("not json")
    assert "is not JSON (line 1" in _one_line_error(["card", "--compare", card, str(tmp_path / "text.json"), "--out", out],
                                                     capsys)
    without = tmp_path / "bare"
    without.mkdir()
    for name in ("config.json", "model.safetensors"):
        (without / name).write_bytes((bare / name).read_bytes())
    assert "has no tokenizer" in _one_line_error(["card", str(without), "--out", out], capsys)
    # The real protocol's 528-odd tokens on a GPT-2 of 64 positions: refused before a weight is read.
    assert "64" in _one_line_error(["card", str(bare), "--out", out], capsys)
    assert not (tmp_path / "never").exists()


def test_smollm2s_chat_form_is_transformers_rendering_around_the_system_prompt():
    """The opening and the turn tokens of the packaged SmolLM2 are what transformers' apply_chat_template
    renders (from the same GGUF file) before the system prompt and between it and the user message."""
    from nohair_jax.checkpoints import packaged_model_path

    path = packaged_model_path("smollm2-135m")
    reference = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    system, user = "You are a pirate.", "How do I keep tomato plants from growing only leaves?"
    ids = reference.apply_chat_template([dict(role="system", content=system), dict(role="user", content=user)],
                                        tokenize=True, add_generation_prompt=True)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)  # a BatchEncoding in transformers 5
    tokenizer = load_tokenizer("smollm2-135m")
    form = cards.chat_form(tokenizer, nh.chat_template("smollm2-135m"))
    head, mid = form.head.tolist(), form.mid.tolist()
    parts = [head, tokenizer.encode(system).ids, mid, tokenizer.encode(user).ids]
    assert ids[: sum(map(len, parts))] == [i for part in parts for i in part]
    assert form.kind == "template" and len(head) == 3 and len(mid) == 5
    pairs = cards.card_pairs(tokenizer, form)
    assert [x.shape for x in pairs] == [(16, 19), (16, 19), (16, 512)]
    assert (pairs.prompts_a[:, :3] == head).all() and (pairs.continuations[:, :5] == mid).all()
    assert (pairs.prompts_a[:, 3:] != pairs.prompts_b[:, 3:]).any(axis=1).all()
