"""BOS as the tokenizer says (``tokenization.sequence_start``) on every path that turns text into prompt ids.

A model trained with a BOS first (Gemma, Llama 2) reads a text without it out of distribution. Each path
is held on a tokenizer that wants BOS and one that does not: text pairs cut from a stream, prompts
tokenized from text, chat and ``--raw`` renderings (BOS once, never doubled where a template writes it),
and a folder whose tokenizer_config.json says ``add_bos_token`` (held to transformers' own tokenizer of
the same folder). The real SmolLM2 tokenizer on disk (byte-level BPE) adds none.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("gguf")

import nohair_jax as nh  # noqa: E402
from nohair_jax.chat import ChatTemplate, system_prompt_pairs  # noqa: E402
from nohair_jax.checkpoints import load_tokenizer  # noqa: E402
from nohair_jax.checkpoints.gguf_tokenizer import gguf_tokenizer  # noqa: E402
from nohair_jax.checkpoints.hf_folder import folder_tokenizer  # noqa: E402
from nohair_jax.system_prompts import RAW  # noqa: E402
from gguf_writer import sentencepiece_vocab  # noqa: E402
from test_gguf_tokenizer import sentencepiece_file  # noqa: E402

TOKENS = sentencepiece_vocab()[0]
BOS = TOKENS.index("<s>")


@pytest.fixture(scope="module")
def wants_bos(tmp_path_factory):
    """A SentencePiece GGUF tokenizer whose file says add_bos_token (llama.cpp's default)."""
    return gguf_tokenizer(sentencepiece_file(tmp_path_factory.mktemp("bos"), "llama"))


@pytest.fixture(scope="module")
def no_bos(tmp_path_factory):
    return gguf_tokenizer(sentencepiece_file(tmp_path_factory.mktemp("nobos"), "llama", add_bos_token=False))


def test_sequence_start_is_the_bos_a_tokenizer_adds(wants_bos, no_bos):
    assert nh.sequence_start(wants_bos).tolist() == [BOS]
    assert nh.sequence_start(no_bos).tolist() == []
    assert nh.sequence_start(None).tolist() == []  # UTF-8 bytes
    assert nh.sequence_start(load_tokenizer("smollm2-135m")).tolist() == []  # the real byte-level BPE file


def test_text_pairs_open_with_the_start_within_their_length():
    stream = np.arange(100, 400)
    plain = nh.text_prompt_pairs(stream, 0, 4, 6, 20)
    opened = nh.text_prompt_pairs(stream, 0, 4, 6, 20, start=[BOS])
    assert opened.prompts_a.shape == opened.prompts_b.shape == (4, 6)
    assert (opened.prompts_a[:, 0] == BOS).all() and (opened.prompts_b[:, 0] == BOS).all()
    # the rest of each prompt is one contiguous cut of the stream
    assert (np.diff(opened.prompts_a[:, 1:], axis=1) == 1).all() and (np.diff(opened.prompts_b[:, 1:], axis=1) == 1).all()
    assert (plain.prompts_a[:, 0] != BOS).all()
    with pytest.raises(ValueError, match="prompt_len 1 leaves no room for text after the 1 start token"):
        nh.text_prompt_pairs(stream, 0, 4, 1, 20, start=[BOS])


def test_prompts_from_text_get_bos_and_continuations_do_not(wants_bos, no_bos):
    pairs = nh.tokenized_prompt_pairs(wants_bos, ["the cat"], ["the end"], "is in the street")
    assert pairs.prompts_a[0, 0] == BOS and pairs.prompts_b[0, 0] == BOS and BOS not in pairs.continuations
    pairs = nh.tokenized_prompt_pairs(no_bos, ["the cat"], ["the end"], "is in the street")
    assert BOS not in pairs.prompts_a and BOS not in pairs.prompts_b


# A template that writes BOS itself, as Gemma's and Llama 2's do.
WRITES_BOS = ChatTemplate("{{ bos_token }}{% for m in messages %}{{ m['content'] }}\n{% endfor %}", bos_token="<s>",
                          origin="a template that writes BOS")


@pytest.mark.parametrize("template", [RAW, WRITES_BOS], ids=["raw", "writes_bos"])
def test_chat_and_raw_renderings_hold_one_bos_where_the_tokenizer_wants_it(wants_bos, no_bos, template):
    sp = system_prompt_pairs(wants_bos, template, "the cat", "the end", ["is it the street"])
    for prompt in (sp.pairs.prompts_a[0], sp.pairs.prompts_b[0]):
        assert prompt[0] == BOS and (prompt == BOS).sum() == 1
    sp = system_prompt_pairs(no_bos, template, "the cat", "the end", ["is it the street"])
    first = {int(sp.pairs.prompts_a[0, 0]), int(sp.pairs.prompts_b[0, 0])}
    assert first == ({BOS} if template is WRITES_BOS else {TOKENS.index("▁the")})  # what the template writes, no more


@pytest.mark.parametrize("settings, ids", [(dict(add_bos_token=True), [0, 3, 4]),
                                           (dict(add_bos_token=False, add_eos_token=True), [3, 4, 1]),
                                           ({}, [0, 3, 4])])
def test_a_folders_add_bos_token_decides_what_is_put_around_a_sequence(tmp_path, settings, ids):
    """tokenizer_config.json's add_bos_token / add_eos_token rebuild what is put around a sequence, as transformers'
    Llama and Gemma tokenizers rebuild it (``update_post_processor``: BOS, text, EOS as the flags say, false where
    unsaid); without either flag, tokenizer.json's own post-processor (here: BOS) stands. (transformers' generic
    ``TokenizersBackend`` keeps tokenizer.json's whatever the flags say: checked here, so that a change shows.)"""
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {"<bos>": 0, "<eos>": 1, "<unk>": 2, "the": 3, "cat": 4}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 0)])
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(dict(
        settings, tokenizer_class="PreTrainedTokenizerFast", bos_token="<bos>", eos_token="<eos>", unk_token="<unk>")))
    assert folder_tokenizer(tmp_path).encode("the cat", add_special_tokens=True).ids == ids
    assert transformers.AutoTokenizer.from_pretrained(tmp_path)("the cat")["input_ids"] == [0, 3, 4]
