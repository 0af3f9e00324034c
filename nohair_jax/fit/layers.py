"""Power-law fits of every layer of a model, and the tables made of them (docs/definitions.md#fits).

Offsets per layer are ``l2 [n_pairs, L+1, T]`` (layer 0 the embedding, positions ``t [T]`` in tokens,
units of the hidden state); each layer 1..L gets a ``PowerLawFit`` or a ``FitRefused``, with what a
sliding attention window does to its fit window said beside it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from nohair_jax.fit._checks import _check_last_axis, _check_t, _real
from nohair_jax.fit.powerlaw import FitRefused, PowerLawFit, fit_or_refuse


def fit_layers(t, l2, floor=None, *, sliding_window=None, window_layers=None,
               **fit_kwargs) -> list[PowerLawFit | FitRefused]:
    """``fit_or_refuse`` of every layer 1..L of ``l2 [n_pairs, L+1, T]`` (layer 0, the embedding, is
    not fitted); ``floor [L+1, T]`` or None; ``fit_kwargs`` go to every fit (``groups`` for a
    hierarchical interval, say), so that one layer refused does not fail the whole model.

    ``sliding_window`` (tokens) and ``window_layers`` (0-based, None: every layer): the model's window, as
    ``TransformerConfig`` holds it; what it does to the fits of the window layers and of the layers above
    them is then said (``_window_caveat``).
    """
    t, l2 = _check_t(t), _real("l2", l2)
    if l2.ndim != 3 or l2.shape[0] == 0:
        raise ValueError(f"l2 must have shape [n_pairs, L+1, T] with n_pairs >= 1, got shape {l2.shape}")
    _check_last_axis(t, l2, "l2")
    if floor is not None:
        floor = _real("floor", floor)
        if floor.shape != l2.shape[1:]:
            raise ValueError(f"floor must have shape [L+1, T] = {l2.shape[1:]} (as l2), got shape {floor.shape}")
    fits = [fit_or_refuse(t, l2[:, layer], floor=None if floor is None else floor[layer], **fit_kwargs)
            for layer in range(1, l2.shape[1])]
    if sliding_window is None:
        return fits
    windowed = range(1, len(fits) + 1) if window_layers is None else sorted(layer + 1 for layer in window_layers)
    t_max = t[-1] if fit_kwargs.get("t_max") is None else fit_kwargs["t_max"]
    return [_window_caveat(fit, layer, t, l2[:, layer], t_max, sliding_window, windowed) for layer, fit in
            enumerate(fits, start=1)]


def _window_caveat(fit, layer: int, t, d, t_max, width: int, windowed) -> PowerLawFit | FitRefused:
    """``fit`` of the offsets ``d [n_pairs, T]`` at positions ``t [T]`` of ``layer`` (1..L) in a model with a
    sliding window of ``width`` tokens on the layers ``windowed`` (1-based), with what the window does to it;
    ``t_max``: the end of the fit window asked for.

    A window layer's query at continuation position t reads the prompt's last key only while t < width:
    from t = width on that layer sees the prompt only through earlier layers, and the layers above it get
    only that much of it from there. A fit of such a layer, or of one above it, whose window holds t on
    both sides of that point gets a ``caveat`` saying so. Where the layers 1..layer all have the window
    (the first of them, or Mistral's on every layer), each reaches width - 1 positions further back and the
    offset is exactly 0 from t = layer (width - 1) + 1 on: a refused fit whose window reaches there gets that
    as its reason (the data must show it: every pair's offset 0 there)."""
    below = [k for k in windowed if k < layer]
    if isinstance(fit, PowerLawFit):
        low, high = fit.t_range
        if not (layer in windowed or below) or not low < width <= high:
            return fit
        crosses = f"the fit window [{low}, {high}] crosses t = {width}, where the prompt leaves"
        if layer in windowed:
            return dataclasses.replace(fit, caveat=f"{crosses} this layer's {width}-token window: from there on the "
                                                   "layer sees the prompt only through earlier layers")
        layers = f"layer {below[0]}" if len(below) == 1 else f"layers {', '.join(map(str, below))}"
        return dataclasses.replace(fit, caveat=f"{crosses} the {width}-token window of {layers} below: from there on "
                                               f"less of the prompt reaches this layer through {layers}")
    if layer not in windowed or len(below) < layer - 1:
        return fit
    silent = layer * (width - 1) + 1
    if silent > t_max or np.any(np.asarray(d)[..., np.asarray(t) >= silent]):
        return fit
    if layer == 1:
        return FitRefused(f"the prompt is outside this layer's {width}-token window from t = {silent} on: its offset "
                          "is exactly 0 there")
    return FitRefused(f"the prompt is outside the {width}-token windows of layers 1 to {layer} (each reaching "
                      f"{width - 1} positions further back) from t = {silent} on: this layer's offset is exactly 0 there")


def alphas(fits: list[PowerLawFit | FitRefused]) -> list[float | None]:
    """alpha of each of ``fits`` (``PowerLawFit`` or ``FitRefused``), None where it was refused."""
    return [fit.alpha if isinstance(fit, PowerLawFit) else None for fit in fits]


def alpha_table(fits: list[PowerLawFit | FitRefused]) -> np.ndarray:
    """float [len(fits), 3]: alpha, interval low, interval high of each fit; nan where refused or
    where there is no interval (what a figure draws, error bars included)."""
    rows = [(f.alpha, *(f.ci or (np.nan, np.nan))) if isinstance(f, PowerLawFit) else (np.nan,) * 3 for f in fits]
    return np.array(rows, dtype=np.float64).reshape(len(fits), 3)


def fit_windows(fits: list[PowerLawFit | FitRefused]) -> np.ndarray:
    """int [L, 2]: the first and last t each layer's fit used (``t_range``); [0, 0] where it was refused.

    Saved beside the offsets so that anyone can refit the raw curves on the same window.
    """
    windows = [fit.t_range if isinstance(fit, PowerLawFit) else (0, 0) for fit in fits]
    return np.array(windows, dtype=np.int64).reshape(len(fits), 2)
