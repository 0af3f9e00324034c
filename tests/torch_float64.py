"""transformers as a float64 reference (shared by the checkpoint tests)."""

from __future__ import annotations

import contextlib

import torch


@contextlib.contextmanager
def float32_is_float64():
    """transformers in float64 throughout: its modelling code computes norms, RoPE frequencies and the
    attention softmax in float32 whatever the model's dtype (``.float()``, ``.to(torch.float32)``,
    ``torch.arange(dtype=torch.float)``, ``softmax(dtype=torch.float32)``); inside this block each of
    those asks for float64 instead, and new tensors default to float64."""
    patched = (torch.Tensor, "float"), (torch.Tensor, "to"), (torch.nn.functional, "softmax"), (torch, "arange")
    saved = [getattr(owner, name) for owner, name in patched]
    orig_float, orig_to, orig_softmax, orig_arange = saved
    wide = lambda dtype: torch.float64 if dtype is torch.float32 else dtype  # noqa: E731

    def to(self, *args, **kwargs):
        return orig_to(self, *(wide(a) for a in args), **{k: wide(v) for k, v in kwargs.items()})

    replacements = (lambda self, *a, **k: orig_to(self, torch.float64), to,
                    lambda x, *a, dtype=None, **k: orig_softmax(x, *a, dtype=wide(dtype), **k),
                    lambda *a, dtype=None, **k: orig_arange(*a, dtype=wide(dtype), **k))
    default = torch.get_default_dtype()
    for (owner, name), new in zip(patched, replacements):
        setattr(owner, name, new)
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        for (owner, name), old in zip(patched, saved):
            setattr(owner, name, old)
        torch.set_default_dtype(default)
