"""Chat templates (nohair_jax.chat) against transformers' rendering of the same GGUF file, the split
into prompts and shared continuation, and what `nohair prompts` refuses on the packaged SmolLM2
(its run end to end: tests/test_readme.py)."""

import json
import re

import numpy as np
import pytest

from nohair_jax.chat import ChatTemplate, chat_template, read_history, read_messages, system_prompt_pairs
from nohair_jax.checkpoints import load_tokenizer, packaged_model_path
from nohair_jax.cli import main
from nohair_jax.system_prompts import prompt_pairs

transformers = pytest.importorskip("transformers")

PIRATE = "You are a pirate. Answer every question the way an old sea pirate would."
LAWYER = "You are a lawyer. Answer every question the way a careful lawyer would."
MESSAGES = ["How do I keep tomato plants from growing only leaves?", "Why does my old clock stop after a minute?"]


@pytest.fixture(scope="module")
def smollm2():
    return load_tokenizer("smollm2-135m"), chat_template("smollm2-135m")


def test_rendered_tokens_equal_transformers_apply_chat_template_on_the_same_gguf_file(smollm2):
    tokenizer, template = smollm2
    path = packaged_model_path("smollm2-135m")
    reference = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    sp = system_prompt_pairs(tokenizer, template, PIRATE, LAWYER, MESSAGES, length=8)
    for k, message in enumerate(MESSAGES):
        for system, prompts in ((PIRATE, sp.pairs.prompts_a), (LAWYER, sp.pairs.prompts_b)):
            conversation = [dict(role="system", content=system), dict(role="user", content=message)]
            expected = reference.apply_chat_template(conversation, tokenize=True, add_generation_prompt=True)
            expected = np.asarray(expected["input_ids"] if hasattr(expected, "keys") else expected)  # BatchEncoding
            ours = tokenizer.encode(template.render(conversation), add_special_tokens=False).ids
            np.testing.assert_array_equal(ours, expected)
            # The prompt is the rendering up to the system prompt's last token; the continuation the rest.
            np.testing.assert_array_equal(prompts[k], expected[: prompts.shape[1]])
            assert tokenizer.decode(expected[: prompts.shape[1]].tolist()).endswith(system)
        shared = expected[prompts.shape[1]:]
        assert sp.shared[k] == shared.size
        np.testing.assert_array_equal(sp.pairs.continuations[k], shared[:8])
    # ChatML: <|im_end|> \n <|im_start|> user \n, then the message at t = 6.
    assert tokenizer.decode(sp.pairs.continuations[0, :5].tolist(), skip_special_tokens=False) == "<|im_end|>\n<|im_start|>user\n"
    assert sp.message_t.tolist() == [6, 6]
    assert sp.texts[0].startswith("<|im_start|>system\n" + PIRATE)


def test_a_template_that_folds_the_system_prompt_into_the_user_turn_splits_after_it(smollm2):
    tokenizer, _ = smollm2
    gemma_like = ChatTemplate("{{ bos_token }}{% for m in messages[1:] %}<start>{{ m['role'] }}\n{% if loop.first %}"
                              "{{ messages[0]['content'] }}\n\n{% endif %}{{ m['content'] }}<end>\n{% endfor %}",
                              bos_token="<s>")
    sp = system_prompt_pairs(tokenizer, gemma_like, PIRATE, LAWYER, MESSAGES, add_generation_prompt=False)
    assert tokenizer.decode(sp.pairs.prompts_a[0].tolist()).endswith("user\n" + PIRATE)
    assert tokenizer.decode(sp.pairs.continuations[0].tolist()).startswith("\n\nHow do I keep")


def test_a_template_that_rewrites_the_system_prompt_splits_at_the_common_suffix(smollm2):
    tokenizer, _ = smollm2
    shouting = ChatTemplate("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] | upper if m['role'] == 'system' "
                            "else m['content'] }}\n{% endfor %}")
    sp = system_prompt_pairs(tokenizer, shouting, PIRATE, LAWYER, MESSAGES[:1], add_generation_prompt=False)
    assert sp.message_t.tolist() == [0]  # not located: the continuation is what the two share at the end
    text = tokenizer.decode(sp.pairs.continuations[0].tolist())
    assert text.endswith("[user] How do I keep tomato plants from growing only leaves?\n") and "PIRATE" not in text


def test_whole_continuations_padded_at_the_end_leave_each_message_s_last_position_as_it_is_alone(smollm2):
    """A causal model does not see the padding: the KL at each message's last token (the assistant's
    first) from the padded batch equals that message measured alone, without padding. SmolLM2's first
    two blocks (causality is each block's; the 30 took 16 s of the suite for the same check)."""
    from nohair_jax.checkpoints import load_checkpoint
    from nohair_jax.experiments import first_layers
    from nohair_jax.offsets import prompt_pair_offsets

    tokenizer, template = smollm2
    model = first_layers(load_checkpoint("smollm2-135m", seq_len=64)[0], 2)
    history = [dict(role="user", content="Hello."), dict(role="assistant", content="Hello! How can I help?")]
    padded = system_prompt_pairs(tokenizer, template, PIRATE, LAWYER, MESSAGES, history=history, whole=True)
    assert padded.shared[0] != padded.shared[1] and padded.pairs.continuations.shape[1] == max(padded.shared)
    kl = prompt_pair_offsets(model, *padded.pairs).kl
    for k, message in enumerate(MESSAGES):
        alone = system_prompt_pairs(tokenizer, template, PIRATE, LAWYER, [message], history=history).pairs
        expected = prompt_pair_offsets(model, *alone).kl[0, -1]
        assert kl[k, padded.shared[k] - 1] == pytest.approx(expected, rel=1e-4, abs=1e-7)


def test_templates_from_a_folder_and_what_is_refused(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    assert chat_template(folder) is None
    config = dict(bos_token=dict(content="<s>"), eos_token="</s>",
                  chat_template=[dict(name="tool_use", template="x"), dict(name="default", template="{{ bos_token }}"
                                 "{% for m in messages %}{{ m['content'] }}{{ eos_token }}{% endfor %}")])
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    assert chat_template(folder).render([dict(role="user", content="hi")]) == "<s>hi</s>"
    (folder / "chat_template.jinja").write_text("{{ raise_exception('roles must alternate') }}")
    with pytest.raises(ValueError, match="refuses the conversation: roles must alternate"):
        chat_template(folder).render([dict(role="user", content="hi")])
    (folder / "chat_template.jinja").write_text("{% for m in messages %}")
    with pytest.raises(ValueError, match="not valid jinja2"):
        chat_template(folder).render([])
    (folder / "chat_template.jinja").unlink()
    (folder / "tokenizer_config.json").write_text(json.dumps(dict(chat_template=3)))
    with pytest.raises(ValueError, match="chat_template must be a string"):
        chat_template(folder)


def test_messages_and_history_files(tmp_path):
    path = tmp_path / "messages.txt"
    path.write_text("First message,\nover two lines.\n\n\n  Second one.  \n")
    assert read_messages(path) == ["First message, over two lines.", "Second one."]
    path.write_text("\n \n")
    with pytest.raises(ValueError, match="holds no message"):
        read_messages(path)
    turns = tmp_path / "turns.json"
    turns.write_text(json.dumps([dict(role="user", content="a"), dict(role="user", content="b")]))
    with pytest.raises(ValueError, match='turn 2 must be {"role": "assistant"'):
        read_history(turns)


def test_bad_pairs_are_refused_in_one_line(smollm2):
    tokenizer, template = smollm2
    with pytest.raises(ValueError, match="same text"):
        system_prompt_pairs(tokenizer, template, PIRATE, PIRATE, MESSAGES)
    with pytest.raises(ValueError, match="no user messages"):
        system_prompt_pairs(tokenizer, template, PIRATE, LAWYER, [])
    with pytest.raises(ValueError, match=r"message 2 shares 21 tokens after the system prompts, fewer than --length 500"):
        system_prompt_pairs(tokenizer, template, PIRATE, LAWYER, MESSAGES, length=500)
    dropping = ChatTemplate("{% for m in messages %}{% if m['role'] == 'user' %}{{ m['content'] }}{% endif %}{% endfor %}")
    with pytest.raises(ValueError, match="may drop the system prompt"):
        system_prompt_pairs(tokenizer, dropping, PIRATE, LAWYER, MESSAGES)


def test_three_system_prompts_make_every_pair_in_order(smollm2):
    """Systems i < j, each pair rendered as two systems alone would be (the command's result set on
    SmolLM2 is checked on the README's own prompts command: tests/test_readme.py)."""
    tokenizer, template = smollm2
    pairs = prompt_pairs(tokenizer, template, [PIRATE, LAWYER, "You are a poet."], MESSAGES)
    assert list(pairs) == [(0, 1), (0, 2), (1, 2)]
    alone = system_prompt_pairs(tokenizer, template, LAWYER, "You are a poet.", MESSAGES)
    for got, want in zip(pairs[1, 2].pairs, alone.pairs):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("case, expected", [
    ("no template", "carries no chat template"),
    ("unanswered", "turn 3, the last, is a user turn with no assistant answer after it"),
    ("one system prompt", "give two or more system prompts"),
    ("empty messages", "holds no message"),
    ("too long", "8192"),
    ("window", "--fit-t-min 500 leaves no fit window"),
    ("turns", "--turns counts the exchanges of a --history file"),
])
def test_cli_prompts_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, case, expected):
    messages = tmp_path / "messages.txt"
    messages.write_text("" if case == "empty messages" else ("word " * 9000 if case == "too long" else MESSAGES[0]))
    checkpoint = "smollm2-135m"
    if case == "no template":
        from nohair_jax.checkpoints.hf_folder import TOKENIZER_FILE

        checkpoint = tmp_path / "folder"
        checkpoint.mkdir()
        load_tokenizer("smollm2-135m").save(str(checkpoint / TOKENIZER_FILE))
    systems = ["--system", PIRATE] + ([] if case == "one system prompt" else ["--system", LAWYER])
    out = tmp_path / "run"
    argv = ["prompts", "--checkpoint", str(checkpoint), *systems, "--messages", str(messages), "--out", str(out)]
    history = tmp_path / "conversation.json"
    history.write_text(json.dumps([dict(role="user", content="Hi."), dict(role="assistant", content="Hello."),
                                   dict(role="user", content="Never answered.")]))
    extra = {"window": ["--fit-t-min", "500"], "turns": ["--turns", "2"], "unanswered": ["--history", str(history)]}.get(case, [])
    assert main(argv + extra) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("nohair prompts: error: ") and expected in err and "\n" not in err, err
    if case == "no template":
        assert "--raw" in err
    assert not out.exists() or not any(p.name != ".nohair.lock" for p in out.iterdir())


def test_a_history_ending_with_an_unanswered_user_turn_is_refused_naming_the_file_and_turn(tmp_path):
    """History is used in exchanges (user, assistant): a last user turn would be left out of every
    conversation without a word, so it is refused."""
    turns = tmp_path / "turns.json"
    turns.write_text(json.dumps([dict(role="user", content="a"), dict(role="assistant", content="b"),
                                 dict(role="user", content="c")]))
    with pytest.raises(ValueError, match=rf"^{re.escape(str(turns))}: turn 3, the last, is a user turn with no assistant answer"):
        read_history(turns)


@pytest.mark.parametrize("source, what", [
    ("{{ messages[0]['content'] }}|{{ messages[-1]['content'] }}", r"turn 1 of the history \(user\): 'Hello.'"),
    ("{% for m in messages %}{{ m['content'][:20] }}|{% endfor %}", "message 1: 'How do I keep tomato plants"),
    ("{% for m in messages %}{{ m['content'] | upper if loop.last else m['content'] }}|{% endfor %}",
     "message 1: 'How do I keep tomato plants"),
])
def test_a_template_that_drops_or_alters_a_turn_is_refused_naming_it(smollm2, source, what):
    """Every turn given (the history's, then the message) must be in the rendering as given: a
    template that keeps only the system prompt and the last turn, cuts or rewrites a message would
    measure another conversation."""
    tokenizer, _ = smollm2
    history = [dict(role="user", content="Hello."), dict(role="assistant", content="Hi! How can I help?")]
    template = ChatTemplate(source, origin="mine.jinja")
    with pytest.raises(ValueError, match=f"^the chat template of mine.jinja drops or alters {what}"):
        system_prompt_pairs(tokenizer, template, PIRATE, LAWYER, MESSAGES, history=history)


def test_a_template_that_trims_the_turns_keeps_them(smollm2):
    """The whitespace around a turn is not part of it: templates such as Llama 3's trim it."""
    tokenizer, _ = smollm2
    trimming = ChatTemplate("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] | trim }}</s>{% endfor %}")
    history = [dict(role="user", content="  Hello.\n"), dict(role="assistant", content="\nHi! How can I help?  ")]
    sp = system_prompt_pairs(tokenizer, trimming, PIRATE, LAWYER, MESSAGES, history=history)
    assert sp.texts[0].endswith("<user>Hello.</s><assistant>Hi! How can I help?</s><user>" + MESSAGES[0] + "</s>")


FAILING_TEMPLATES = {  # a user's template whose own code fails: the line names it and what failed
    "division by zero": ("{{ 1 / 0 }}", r"fails on the conversation \(ZeroDivisionError: division by zero\)"),
    "text plus a number": ("{{ messages[0]['content'] + 1 }}", r"fails on the conversation \(TypeError: can only concatenate"),
    "an attribute called that is not there": ("{{ messages.nope() }}",
                                              r"fails on the conversation \(UndefinedError: 'list object' has no attribute 'nope'\)"),
    "a method called with wrong arguments": ("{{ messages[0]['content'].split(1, 2, 3) }}",
                                             r"fails on the conversation \(TypeError: split\(\) takes at most 2 arguments"),
    "endless recursion": ("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}",
                          r"fails on the conversation \(RecursionError: maximum recursion depth exceeded"),
    "nesting too deep to parse": ("{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}",
                                  r"cannot be read as jinja2 \(RecursionError: maximum recursion depth exceeded"),
}


@pytest.mark.parametrize("case", [*FAILING_TEMPLATES, "not UTF-8"])
def test_a_failing_template_is_one_line_naming_it_in_python_and_on_the_command_line(tmp_path, capsys, smollm2, case):
    """Any exception from a user's chat template (a folder's chat_template.jinja here) becomes one
    ValueError line naming the template's file, and ``nohair prompts`` prints it and exits 2."""
    from nohair_jax.checkpoints.hf_folder import TOKENIZER_FILE

    folder = tmp_path / "model"
    folder.mkdir()
    smollm2[0].save(str(folder / TOKENIZER_FILE))
    path = folder / "chat_template.jinja"
    if case == "not UTF-8":
        path.write_bytes(b"{{ 1 }}\xff")  # a byte that begins no UTF-8 character
        expected = re.escape(f"{path} is not UTF-8 text (byte 7: invalid start byte): save the template as UTF-8")
    else:
        source, failure = FAILING_TEMPLATES[case]
        path.write_text(source)
        expected = re.escape(f"the chat template of {path} ") + failure
    with pytest.raises(ValueError, match="^" + expected) as raised:
        chat_template(folder).render([dict(role="system", content=PIRATE), dict(role="user", content=MESSAGES[0])])
    assert "\n" not in str(raised.value)
    messages = tmp_path / "messages.txt"
    messages.write_text(MESSAGES[0])
    argv = ["prompts", "--checkpoint", str(folder), "--system", PIRATE, "--system", LAWYER, "--messages", str(messages),
            "--out", str(tmp_path / "run")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert re.fullmatch(f"nohair prompts: error: {expected}[^\n]*\n", err), err  # the same line (a recursion's text varies)


def test_raw_text_is_the_system_prompt_a_blank_line_and_the_message():
    """--raw: the turns joined by one blank line each, exactly (a block tag under trim_blocks would
    eat the second newline)."""
    from nohair_jax.system_prompts import RAW

    system, user = dict(role="system", content=PIRATE), dict(role="user", content=MESSAGES[0])
    assert RAW.render([system, user]) == PIRATE + "\n\n" + MESSAGES[0]
    history = [dict(role="user", content="Hello."), dict(role="assistant", content="Hi!")]
    assert RAW.render([system, *history, user]) == f"{PIRATE}\n\nHello.\n\nHi!\n\n{MESSAGES[0]}"
