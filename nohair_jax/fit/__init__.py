"""Power-law fits of prompt-pair offset curves, with honest windows, intervals and noise floors.

An offset curve is ``d(t) > 0`` at continuation positions ``t = 1..T`` (tokens), measured for many
prompt pairs: an array ``d`` of shape ``[n_pairs, T]`` (or ``[T]`` for one curve). It decays roughly as
``A t^-alpha``; these modules fit ``alpha`` and say how far to trust it (docs/definitions.md#fits), one
idea each:

* ``powerlaw``: the fit on a stated window, ``PowerLawFit``, ``FitRefused``;
* ``layers``: the fit of every layer, and the tables made of the fits;
* ``binning``: log-spaced bins of t, the summary curve over pairs, least squares in log-log;
* ``intervals``: bootstrap resampling of pairs, Student-t intervals, Welch, Bonferroni
  (docs/definitions.md#intervals);
* ``differences``: the difference of two alphas on one window, unpaired or paired;
* ``tolerance``: "approximately a power law" at a stated tolerance;
* ``exponents``: the local exponent, its rise, alpha over many windows;
* ``half_life``: the prompt half-life of next-token KL curves;
* ``floors``: the float32 noise floor, and the window's end before it;
* ``records``: results read back from their JSON.

Everything is numpy, float64 throughout.
"""

# _bin_mean and _log_bins: the coverage tests bin their truths as the fits bin.
from nohair_jax.fit.binning import (
    _bin_mean as _bin_mean, _log_bins as _log_bins, log_binned as log_binned, summary_curve as summary_curve,
)
from nohair_jax.fit.differences import (
    AlphaDifference as AlphaDifference, alpha_difference as alpha_difference,
    difference_or_refuse as difference_or_refuse, paired_alpha_difference as paired_alpha_difference,
    paired_difference_or_refuse as paired_difference_or_refuse,
)
from nohair_jax.fit.exponents import (
    ExponentRise as ExponentRise, alpha_vs_window as alpha_vs_window, local_exponent as local_exponent,
    local_exponent_rise as local_exponent_rise, quarter_rise as quarter_rise,
)
from nohair_jax.fit.floors import NoiseFloorError as NoiseFloorError, noise_floor_curve as noise_floor_curve
from nohair_jax.fit.half_life import HalfLife as HalfLife, kl_half_life as kl_half_life
from nohair_jax.fit.intervals import (
    bonferroni as bonferroni, bootstrap_indices as bootstrap_indices, t_interval as t_interval,
)
from nohair_jax.fit.layers import (
    alpha_table as alpha_table, alphas as alphas, fit_layers as fit_layers, fit_windows as fit_windows,
)
from nohair_jax.fit.powerlaw import (
    FitRefused as FitRefused, PowerLawFit as PowerLawFit, fit_or_refuse as fit_or_refuse,
    fit_power_law as fit_power_law,
)
from nohair_jax.fit.records import fit_from_dict as fit_from_dict
from nohair_jax.fit.tolerance import (
    DECAY_LAWS as DECAY_LAWS, PowerLawTolerance as PowerLawTolerance, power_law_tolerance as power_law_tolerance,
)

__all__ = [
    "FitRefused",
    "NoiseFloorError",
    "PowerLawFit",
    "PowerLawTolerance",
    "alpha_table",
    "alphas",
    "fit_from_dict",
    "fit_layers",
    "fit_or_refuse",
    "fit_windows",
    "alpha_vs_window",
    "fit_power_law",
    "local_exponent",
    "log_binned",
    "noise_floor_curve",
    "power_law_tolerance",
    "summary_curve",
    "ExponentRise",
    "local_exponent_rise",
    "quarter_rise",
    "t_interval",
    "bonferroni",
]
