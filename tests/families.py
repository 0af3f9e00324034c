"""One tiny Hugging Face model per family the project loads (``checkpoints.families.ARCHITECTURES``): the table
the per-family tests read (test_card, test_metadata, test_config_defaults, test_checkpoints). A new family is a
row here; these tests then run on it.

Each row: the transformers model class, its config's arguments (2 layers, 3 heads of 8 features unless a row
says otherwise, one key/value head, 64 positions, a 300-token vocabulary: test_card's byte-level tokenizer
has 256 bytes and 3 special tokens), the chat template its folder carries (None: raw text), whether its
tokenizer adds a BOS, and whether the relay model's derivation covers its block (pre-LN, sequential), stated
here from the family's own modelling code in transformers.
"""

from __future__ import annotations

import dataclasses

import transformers

SIZES = dict(vocab_size=300, hidden_size=24, intermediate_size=40, num_hidden_layers=2, num_attention_heads=3,
             num_key_value_heads=1, max_position_embeddings=64)

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# Writes the BOS itself, as Llama 3's does: a card must not add a second one.
WITH_BOS = "{{ bos_token }}" + CHATML
# Takes no system role, as Mistral's; a space before the content, which the tokenizer joins to it.
NO_SYSTEM = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('no system role') }}"
             "{% endif %}[INST] {{ m['content'] }} [/INST]{% endfor %}")


@dataclasses.dataclass(frozen=True)
class Family:
    """One family's tiny model: see the module docstring."""

    model_class: str
    config: dict
    template: str | None
    adds_bos: bool
    pre_ln: bool

    def hf_config(self):
        """The transformers config object (a fresh one: transformers' configs edit the dicts they are given)."""
        name = {"GPT2LMHeadModel": "GPT2Config", "Gemma3ForCausalLM": "Gemma3TextConfig"}.get(
            self.model_class, self.model_class.replace("ForCausalLM", "Config"))
        return getattr(transformers, name)(**_copied(self.config))


def _copied(value):
    return {k: _copied(v) for k, v in value.items()} if isinstance(value, dict) else value


FAMILIES = {
    # No template (raw text).
    "gpt2": Family("GPT2LMHeadModel", dict(vocab_size=300, n_embd=24, n_layer=2, n_head=3, n_positions=64), None,
                   False, True),
    # Llama 3's RoPE scaling: with head_dim 8 and theta 500 its three wavelength branches all act.
    "llama": Family("LlamaForCausalLM", dict(SIZES, rope_theta=500.0, rope_scaling=dict(
        rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=64)),
                    WITH_BOS, False, True),
    "mistral": Family("MistralForCausalLM", dict(SIZES, sliding_window=16), NO_SYSTEM, True, True),
    # The window on layer 2 only (from max_window_layers = 1 on).
    "qwen2": Family("Qwen2ForCausalLM", dict(SIZES, use_sliding_window=True, sliding_window=16, max_window_layers=1),
                    CHATML, False, True),
    # Heads of 10 features (not hidden_size / heads = 8) and an RMSNorm on every head's q and k.
    "qwen3": Family("Qwen3ForCausalLM", dict(SIZES, head_dim=10), CHATML, False, True),
    # The parallel block, RoPE on half of each head's features, LayerNorm biases.
    "gpt_neox": Family("GPTNeoXForCausalLM", dict(SIZES, rotary_pct=0.5), CHATML, False, False),
    # Norms on the sublayers' outputs only.
    "olmo2": Family("Olmo2ForCausalLM", dict(SIZES, pad_token_id=0, eos_token_id=1), CHATML, False, False),
    "phi3": Family("Phi3ForCausalLM", dict(SIZES, pad_token_id=0, eos_token_id=1, partial_rotary_factor=0.5), CHATML,
                   False, True),
    # Sandwich norms, a window on every second layer.
    "gemma2": Family("Gemma2ForCausalLM", dict(SIZES, head_dim=8, query_pre_attn_scalar=8, sliding_window=16), CHATML,
                     True, False),
    # Window layers with their own RoPE base, the global one scaled linearly.
    "gemma3_text": Family("Gemma3ForCausalLM", dict(
        SIZES, head_dim=8, query_pre_attn_scalar=8, sliding_window=16, sliding_window_pattern=2,
        rope_parameters=dict(full_attention=dict(rope_type="linear", factor=4.0, rope_theta=1000.0),
                             sliding_attention=dict(rope_type="default", rope_theta=50.0))), CHATML, True, False),
    # LayerNorm with biases, biases on every projection, a GELU MLP, a window on every layer.
    "starcoder2": Family("Starcoder2ForCausalLM", dict(SIZES, sliding_window=16), CHATML, False, True),
}
