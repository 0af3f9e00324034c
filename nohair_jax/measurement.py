"""The one measurement pipeline: models and prompt pairs -> a ``Measurement``, saved in one layout.

Every measurement in the project runs through ``measure``: ``nohair offsets`` and the experiments
(``measure(...).save(out_dir)``), the training callback (``train.offsets_callback``) and a sweep's
cells (``sweep.measure_cell``). It runs the offsets (``offsets.prompt_pair_offsets`` for one model;
``offsets.map_pairs``' stacked backend, as ``sweep_offsets``, for several of one config or on a
mesh), the float noise floor against
float64 (``offsets.measure_noise_floor``) and a power-law fit per layer (``fit.fit_layers``, told the models'
sliding window: a fit across the t where the prompt leaves it is flagged).
Definitions: docs/definitions.md#offsets and #fits; names, shapes and units: #conventions.

The layout every measurement writes (``Measurement.arrays``; several models add leading axes [S, N]
where one model has [N]):

    t [T], l2, relative, norm [N, L+1, T], kl [N, K] at kl_t [K] (every t unless kl_positions),
    prompt_len, fit_window int [L, 2] (``fit.fit_windows``), floor [L+1, T] where measured
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import NamedTuple

import numpy as np
from jax.sharding import Mesh

from nohair_jax.config import TransformerConfig
from nohair_jax.figures import offsets_figure
from nohair_jax.fit import FitRefused, PowerLawFit, fit_from_dict, fit_layers, fit_windows, kl_half_life
from nohair_jax.model import Transformer
from nohair_jax.offsets import Offsets, check_pairs, map_pairs, measure_noise_floor, pair_offsets, prompt_pair_offsets
from nohair_jax.pairs import PromptPairs
from nohair_jax.results import jsonable, load_json, save_figure, save_json, save_npz, written_together


@dataclasses.dataclass(frozen=True)
class Measurement:
    """Offsets of ``n_models`` models (one config) on the same N pairs, their floor and fits.

    offsets: ``Offsets`` with the pairs of every model on one axis, model-major: l2 [S * N, L+1, T]
      (S = 1 for one model).
    floor: [L+1, T] float32 noise of l2 (the first model against float64), None if not measured.
    fits: one ``PowerLawFit`` or ``FitRefused`` per layer 1..L, over every model's pairs at once.
    config: the models' ``TransformerConfig``. fit_settings: what the fits were given.
    floor_pairs: how many pairs the floor was measured on (0: none).
    n_models: S where the models ran stacked (``sweep_offsets``): saved arrays then have axes
      [S, N, ...]; None for one model on its own (axes [N, ...]).
    """

    offsets: Offsets
    floor: np.ndarray | None
    fits: tuple[PowerLawFit | FitRefused, ...]
    config: TransformerConfig
    fit_settings: dict
    floor_pairs: int = 0
    n_models: int | None = None

    @property
    def fit_window(self) -> np.ndarray:
        """int [L, 2], ``fit.fit_windows`` of the fits."""
        return fit_windows(self.fits)

    def per_model(self, x: np.ndarray) -> np.ndarray:
        """[S * N, ...] -> [S, N, ...] (unchanged for one model on its own)."""
        return x if self.n_models is None else x.reshape(self.n_models, -1, *x.shape[1:])

    def arrays(self) -> dict[str, np.ndarray]:
        """The saved layout (the module docstring), as numpy arrays."""
        off = self.offsets
        arrays = dict(t=off.t, l2=self.per_model(off.l2), relative=self.per_model(off.relative), kl=self.per_model(off.kl),
                      kl_t=off.kl_t, norm=self.per_model(off.norm), prompt_len=off.prompt_len, fit_window=self.fit_window)
        if self.floor is not None:
            arrays["floor"] = self.floor
        return arrays

    def save(self, out_dir: str | Path, *, meta: dict | None = None, figure: bool = True) -> dict:
        """Write ``offsets.npz`` (``arrays``), ``fit.json`` and, with ``figure``, ``offsets.png`` into
        ``out_dir`` (``draw_offsets`` draws it later from the two files); returns the contents of
        ``fit.json``: model config, fit settings, ``meta``, one fit per layer, where the floor was,
        and the next-token KL's half-life (``fit.kl_half_life``, the fits' ``n_boot``)."""
        out_dir, off = Path(out_dir), self.offsets
        float64 = bool(off.l2.dtype == np.float64)
        floor = f"float32 vs float64 on {self.floor_pairs} pairs" if self.floor_pairs else "not measured"
        summary = {
            "model": self.config.to_dict(),
            "n_pairs": int(off.l2.shape[0]),
            "prompt_len": off.prompt_len,
            "length": int(off.l2.shape[-1]),
            "float64": float64,
            "fit_settings": self.fit_settings,
            "noise_floor": "not measured (float64 run)" if float64 else floor,
            "meta": meta or {},
            "fits": [fit.to_dict() for fit in self.fits],
            "kl_positions": "every t" if off.kl_positions is None else f"{off.kl_t.size} of {off.t.size} t",
            "kl_half_life": kl_half_life(off.kl, t=off.kl_t, n_boot=self.fit_settings.get("n_boot", 1000)).to_dict(),
        }
        arrays = self.arrays()
        with written_together():  # a failed write (a full disk) leaves the previous set whole
            save_npz(out_dir / "offsets.npz", **arrays)
            save_json(out_dir / "fit.json", summary)
            if figure:
                save_figure(out_dir / "offsets.png", _figure(arrays, jsonable(summary)))
        return summary


def measure(
    models: Transformer | list[Transformer],
    pairs: PromptPairs,
    *,
    float64: bool = False,
    kl_positions=None,
    floor_pairs: int = 2,
    fit_kwargs: dict | None = None,
    mesh: Mesh | None = None,
    batch_size: int = 1,
    progress: bool = False,
) -> Measurement:
    """Offsets, noise floor and per-layer fits of ``models`` on ``pairs``.

    Args:
      models: one ``Transformer``, or several of one config (seeds, checkpoints): these, or any
        ``mesh``, run as stacked parameters in one program (as ``offsets.sweep_offsets``, with
        ``batch_size`` items vmapped at once); one model alone runs pair by pair
        (``offsets.prompt_pair_offsets``, with ``float64``, ``kl_positions`` and ``progress``).
      pairs: ``PromptPairs`` (shapes as ``prompt_pair_offsets``).
      floor_pairs: pairs of the first model run again in float64 to measure the float32 noise
        floor (0: none; a float64 run has none).
      fit_kwargs: given to every layer's ``fit_power_law`` (``groups``, ``n_boot``, ``t_min`` ...).
    """
    models = [models] if isinstance(models, Transformer) else list(models)
    fit_kwargs = dict(fit_kwargs or {})
    stacked = len(models) > 1 or mesh is not None
    if not stacked:
        offsets = prompt_pair_offsets(models[0], *pairs, float64=float64, kl_positions=kl_positions, progress=progress)
    else:
        if float64 or kl_positions is not None:
            raise ValueError("float64 and kl_positions are for one model on its own, not for stacked models or a mesh")
        a, b, c = check_pairs(models[0].config, *pairs)
        l2, relative, norm, kl = map_pairs(pair_offsets, models, a, b, c, mesh=mesh, batch_size=batch_size)
        offsets = Offsets(l2=l2, relative=relative, kl=kl, norm=norm, prompt_len=a.shape[1])
    floor_pairs = 0 if float64 else floor_pairs
    # The first model's pairs lead the stacked offsets, so these are its own offsets of those pairs.
    floor = measure_noise_floor(models[0], *pairs, n_pairs=floor_pairs, measured=offsets) if floor_pairs else None
    fits = tuple(fit_layers(offsets.t, offsets.l2, floor, **_window(models[0].config), **fit_kwargs))
    return Measurement(offsets=offsets, floor=floor, fits=fits, config=models[0].config, fit_settings=fit_kwargs,
                       floor_pairs=floor_pairs, n_models=len(models) if stacked else None)


class Pooled(NamedTuple):
    """Several measurements of one architecture on pairs of one shape (seeds, say) as one sample.

    t [T]; l2 [sum of N, L+1, T]; floor [L+1, T], the largest of their floors (None if one has none);
    groups int [sum of N], the measurement each pair came from; fits per layer 1..L, whose intervals
    resample the measurements, then the pairs within them (``fit_power_law``'s ``groups``).
    """

    t: np.ndarray
    l2: np.ndarray
    floor: np.ndarray | None
    groups: np.ndarray
    fits: tuple[PowerLawFit | FitRefused, ...]


def pool(measurements: list[Measurement], **fit_kwargs) -> Pooled:
    """The ``measurements`` pooled and fitted per layer (``fit.fit_layers`` with ``fit_kwargs``)."""
    l2 = np.concatenate([m.offsets.l2 for m in measurements])
    groups = np.repeat(np.arange(len(measurements)), [m.offsets.l2.shape[0] for m in measurements])
    floors = [m.floor for m in measurements]
    floor = None if any(f is None for f in floors) else np.max(floors, axis=0)
    t = measurements[0].offsets.t
    fits = fit_layers(t, l2, floor, groups=groups, **_window(measurements[0].config), **fit_kwargs)
    return Pooled(t, l2, floor, groups, tuple(fits))


def _window(config: TransformerConfig) -> dict:
    """The sliding window of ``config`` as ``fit.fit_layers`` takes it: its fits then say what the window does."""
    return dict(sliding_window=config.sliding_window, window_layers=config.window_layers)


def draw_offsets(out_dir: str | Path) -> Path:
    """Draw ``offsets.png`` from ``offsets.npz`` and ``fit.json`` in ``out_dir``."""
    out_dir = Path(out_dir)
    with np.load(out_dir / "offsets.npz") as data:
        return save_figure(out_dir / "offsets.png", _figure(dict(data), load_json(out_dir / "fit.json")))


def _figure(data: dict, saved: dict):
    """The offsets figure of one result set: its arrays (``Measurement.arrays``) and fit.json's contents."""
    cfg = saved["model"]
    title = (
        f"{cfg['n_layers']} layers, d_model {cfg['d_model']}, {cfg['position']} positions; "
        f"P = {saved['prompt_len']}, {saved['n_pairs']} pairs"
    )
    fits = [fit_from_dict(fit) for fit in saved["fits"]]
    fig = offsets_figure(data["t"], data["l2"], fits, data["floor"] if "floor" in data else None, kl=data["kl"],
                         kl_t=data["kl_t"] if "kl_t" in data else None, half_life=saved.get("kl_half_life"), title=title)
    return fig
