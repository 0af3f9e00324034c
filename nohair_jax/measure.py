"""One model, one set of prompt pairs: offsets, noise floor, fits per layer, saved and drawn.

The unit of work behind ``nohair offsets`` and the experiments: data first (``offsets.npz`` and
``fit.json`` with the config that made them), then the figure drawn from those files.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from flax import nnx

from nohair_jax.fit import fit_power_law, kl_half_life
from nohair_jax.model import Transformer, TransformerConfig
from nohair_jax.offsets import measure_noise_floor, prompt_pair_offsets
from nohair_jax.pairs import PromptPairs
from nohair_jax.plots import offsets_figure
from nohair_jax.results import load_json, save_figure, save_json, save_npz, written_together


def default_config(depth: int, *, d_model: int = 128, max_len: int = 1024, **config) -> TransformerConfig:
    """The experiments' architecture, trained or not: pre-LN, learned positions, GELU, one head per
    32 features; ``config`` overrides any other ``TransformerConfig`` field."""
    return TransformerConfig(d_model=d_model, n_heads=max(1, d_model // 32), n_layers=depth, max_len=max_len, **config)


def untrained_model(depth: int, *, seed: int = 0, **config) -> Transformer:
    """``default_config(depth, **config)`` at random init from ``seed``."""
    return Transformer(default_config(depth, **config), rngs=nnx.Rngs(seed))


def fit_layers(t: np.ndarray, l2: np.ndarray, floor: np.ndarray | None, **fit_kwargs) -> list[dict]:
    """``fit_power_law`` of every layer 1..L of l2 [n_pairs, L+1, T]; floor [L+1, T] or None;
    ``fit_kwargs`` go to every fit (``groups`` for a hierarchical interval, say).

    A layer whose window is refused (noise floor, too short) gets ``{"error": message}`` instead
    of failing the whole model.
    """
    fits = []
    for layer in range(1, l2.shape[1]):
        try:
            fit = fit_power_law(t, l2[:, layer], floor=None if floor is None else floor[layer], **fit_kwargs)
            fits.append(fit.to_dict())
        except ValueError as err:  # NoiseFloorError, a window too short, d not positive
            fits.append({"error": str(err)})
    return fits


def fit_windows(fits: list[dict]) -> np.ndarray:
    """int [L, 2]: the first and last t each layer's fit used (``t_range``); [0, 0] where it was refused.

    Saved beside the offsets so that anyone can refit the raw curves on the same window.
    """
    return np.array([f.get("t_range", (0, 0)) for f in fits], dtype=np.int64).reshape(len(fits), 2)


def measure_model(
    model: Transformer,
    pairs: PromptPairs,
    out_dir: str | Path,
    *,
    float64: bool = False,
    kl_positions=None,
    floor_pairs: int = 2,
    fit_kwargs: dict | None = None,
    meta: dict | None = None,
    progress: bool = True,
) -> dict:
    """Measure, fit, save and draw; returns the contents of ``fit.json``.

    Writes into ``out_dir``: ``offsets.npz`` (t, l2, relative, kl, kl_t, norm, floor, prompt_len, fit_window;
    kl [n_pairs, K] at the positions kl_t, every t unless ``kl_positions``, as in ``prompt_pair_offsets``),
    ``fit.json`` (model config, fit settings, ``meta``, one fit per layer, where the floor was, the
    next-token KL's half-life ``fit.kl_half_life``)
    and ``offsets.png``. The noise floor is measured against float64 on ``floor_pairs`` pairs;
    a float64 run has no float32 floor and records none.
    """
    out_dir = Path(out_dir)
    fit_kwargs = dict(fit_kwargs or {})
    off = prompt_pair_offsets(model, *pairs, float64=float64, kl_positions=kl_positions, progress=progress)
    floor = None if float64 else measure_noise_floor(model, *pairs, n_pairs=floor_pairs, measured=off)
    fits = fit_layers(off.t, off.l2, floor, **fit_kwargs)

    arrays = dict(t=off.t, l2=off.l2, relative=off.relative, kl=off.kl, kl_t=off.kl_t, norm=off.norm,
                  prompt_len=off.prompt_len, fit_window=fit_windows(fits))
    if floor is not None:
        arrays["floor"] = floor
    summary = {
        "model": model.config.to_dict(),
        "n_pairs": int(off.l2.shape[0]),
        "prompt_len": off.prompt_len,
        "length": int(off.l2.shape[-1]),
        "float64": float64,
        "fit_settings": fit_kwargs,
        "noise_floor": "not measured (float64 run)" if floor is None else f"float32 vs float64 on {floor_pairs} pairs",
        "meta": meta or {},
        "fits": fits,
        "kl_positions": "every t" if kl_positions is None else f"{off.kl_t.size} of {off.t.size} t",
        "kl_half_life": kl_half_life(off.kl, t=off.kl_t, n_boot=fit_kwargs.get("n_boot", 1000)).to_dict(),
    }
    with written_together():  # a failed write (a full disk) leaves the previous pair whole
        save_npz(out_dir / "offsets.npz", **arrays)
        save_json(out_dir / "fit.json", summary)
    draw_offsets(out_dir)
    return summary


def draw_offsets(out_dir: str | Path) -> Path:
    """Draw ``offsets.png`` from ``offsets.npz`` and ``fit.json`` in ``out_dir``."""
    out_dir = Path(out_dir)
    data = np.load(out_dir / "offsets.npz")
    saved = load_json(out_dir / "fit.json")
    cfg = saved["model"]
    title = (
        f"{cfg['n_layers']} layers, d_model {cfg['d_model']}, {cfg['position']} positions; "
        f"P = {saved['prompt_len']}, {saved['n_pairs']} pairs"
    )
    fig = offsets_figure(data["t"], data["l2"], saved["fits"], data["floor"] if "floor" in data else None, title=title)
    return save_figure(out_dir / "offsets.png", fig)
