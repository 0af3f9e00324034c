"""Error rates of the "approximately a power law" verdict on curves of known verdict: the full table.

The harness (families, noise model, truths, requirements) is tests/test_power_law_calibration.py;
the test runs a subset of it, this writes the whole table, ``BENCH_DRAWS`` draws per family and
pair count at ``N_BOOT`` resamples, with a check of a quarter of the draws at the claim's own 1000
resamples, to docs/power_law_calibration.md (about 5 minutes on 2 busy CPU cores).

    python benchmarks/power_law_calibration.py                  # the table, into docs/power_law_calibration.md
    python benchmarks/power_law_calibration.py --draws 20 --out /tmp/calibration.md   # a smoke run
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from scipy.stats import norm
from scipy.stats import t as student_t

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the harness lives with its test
from calibration_cli import calibration_args  # noqa: E402

import test_power_law_calibration as harness  # noqa: E402

CLAIM_BOOT = 1000  # power_law_tolerance's default, what experiments/untrained_alpha.py judges with

HEADER = """# Calibration of "approximately a power law"

Made by `{command}` ({seconds:.0f} s on 2 shared CPU cores). The harness, the noise model and the truths
are `tests/test_power_law_calibration.py` (its docstring); the test runs {test_draws} draws per cell at
{n_boot} resamples under the same requirements.

## The rule

The claim `power_law` (experiments/untrained_alpha.py) is judged by
`fit.power_law_tolerance(...).within({tolerance})` on the alpha fit's window, here `t` in
[{t_min}, {t_max}] (the quick profile), 8 bins per decade:

- the **deviation**, the best power law's largest |log residual| over the bins, is held to {tolerance};
- the **prediction**, the largest |log residual| on the window's second half (in `log t`) of the power
  law fitted to its first half, is held to {tolerance} times **R**, the ratio of the prediction to the
  deviation for a unit log-log curvature, `log d = (log t)^2`, computed exactly on the window's own bins
  (`PowerLawTolerance.curvature_ratio`; stored on every record as `holdout_ratio`).

Why: the papers call a curve approximately a power law on a window when one exponent, fitted over the
window, describes it there within a stated tolerance, whatever law generated it. Both statistics measure
the distance from that one exponent, in different units. For the departure every smooth family shows
first, a local exponent drifting linearly in `log t` (`log d` quadratic, curvature `c`, window width
`W` in `log t`), the best fit's largest residual is `c W^2 / 12` and the half-window prediction's
`13 c W^2 / 24`: 13/4 times as large (continuum of equal bins split evenly); on this window's 15 bins,
unequal in content and split 7 / 8, R = {ratio:.3f}, so the prediction's tolerance is
{holdout_tolerance:.3f}. Holding both to {tolerance}, as before, made the prediction the stricter test by a
factor 3.7 and rejected curves the stated tolerance accepts. The prediction still adds something: a
knee (a change of exponent inside the window) misses by about 4 times its best fit's residual ({knee_ratio:.2f}
for the knees below), more than R, so the prediction catches a knee before the deviation does. The
alternative, a tolerance on the local exponent's drift per decade, would need a threshold derived from
the same quadratic and differences of binned logs, noisier than these residuals; the residuals keep
{tolerance} as the only number and keep their intervals' coverage checks (tests/test_coverage.py).

## Which noiseless curves the definition calls approximately a power law

The definition applied to each family's own curve on this window (no noise, no spread of exponents;
*old rule*: both statistics held to {tolerance}):

| family | deviation | prediction | verdict | old rule |
|---|---|---|---|---|
{own_rows}
So on this window {within_names} are approximately power laws (one exponent describes each within the
tolerance; the relay shape at depth 3 by a hair, deviation {log2_deviation:.3f}); {beyond_names} are not
(`P / (P + t)` by a hair, deviation {p_deviation:.3f}).

## Error rates with noise

Noise: per pair, `d_i(t) = c_i (f(t) / f({t0:g}))^(m_i) exp(e_i(t))`, `m_i` normal, mean 1, sd
{exponent_sd} (SmolLM2's spread of `log alpha` over pairs), sd of `log c_i` {level_sd}, `e_i(t)`
independent, sd {position_sd}. {draws} draws per row, {n_boot} bootstrap resamples per draw.

The truth is the definition applied to the population's mean curve (the mean of infinitely many
pairs, which the mean over a draw's pairs estimates). Mixing exponents bends a curve, so this truth is
not always the family's own verdict (*own*): the spread turns `P / (P + t)` within (deviation
{p_truth:.3f}), and a pure power law's mean curve is bent (deviation {power_truth:.3f}, prediction {power_holdout:.3f}). Columns: *deviation*, *prediction*: the truth's;
*distance*: how far the truth lies from the tolerance in noise standard errors (each bin's residual
against its tolerance, in units of that residual's sd over the draws: the closest bin if within, the
farthest bin beyond if beyond); *wrong*, *not measured*: shares of the draws; *same at {claim_boot}*: the
share of a quarter of the draws whose verdict at the claim's {claim_boot} resamples is the one at {n_boot},
and that quarter's share not measured at each; *breaks*: the requirements (wrong at most {wrong_max:.0%};
not measured at most {undecided_max:.0%} where the distance exceeds 1) the row breaks; *old rule*: truth,
wrong and not measured with both statistics held to {tolerance}, from the same draws.

| family | pairs | truth | own | deviation | prediction | distance (SE) | wrong | not measured | same at {claim_boot} (not measured at {n_boot}, at {claim_boot}) | breaks | old rule: truth, wrong, not measured |
|---|---|---|---|---|---|---|---|---|---|---|---|
"""

FOOTER = """
## What the table says

- Wrong verdicts: at most {max_wrong:.1%} in every row (requirement: {wrong_max:.0%}).
- "Not measured": the requirement (at most {undecided_max:.0%} beyond one noise standard error) is
  broken in {broken} of {rows} rows{listed}. It cannot be met by
  any 95 % interval near the tolerance: a truth `z` standard errors inside it is decided about
  `Phi(z - q)` of the time, `q` the interval's t quantile, so at most {undecided_max:.0%} undecided
  needs `z >= q + 1.28`: {reach_8:.1f} SE at 8 pairs and {reach_16:.1f} at 16 for a truth within; for a truth
  beyond, whose lower end is widened for the bins (Bonferroni), {beyond_8:.1f} and {beyond_16:.1f}. {nearer} of the
  {broken} rows that break it lie nearer than that{exceptions}. No tolerance was tuned to change it.
- The rule before (both held to {tolerance}) called a pure power law's population mean curve beyond
  it (its prediction, {power_holdout:.3f}, above {tolerance}) and left the wiggle undecided in {wiggle_old:.0%} of the
  draws at 8 pairs ({wiggle_new:.0%} now).
- The verdicts at {n_boot} resamples are those at {claim_boot} in at least {min_same:.0%} of the checked draws,
  with the same share not measured within a few draws: the table's resample count does not change
  its rates.
"""


def verdict(v) -> str:
    return {True: "within", False: "beyond", None: "not measured"}[v]


def main() -> None:
    args, command = calibration_args(__doc__, "power_law_calibration.py", harness, ROOT / "docs" / "power_law_calibration.md")
    start = time.perf_counter()
    rows = []
    for name in harness.FAMILIES:
        for n_pairs in harness.PAIRS:
            row = harness.calibrate(name, n_pairs, args.draws, args.n_boot, check_boot=CLAIM_BOOT)
            rows.append(row)
            print(f"{name}, {n_pairs} pairs: truth {verdict(row['truth'])}, {row['distance']:+.1f} SE, "
                  f"wrong {row['wrong']:.1%}, not measured {row['undecided']:.1%}, "
                  f"same at {CLAIM_BOOT}: {row['same_at_check_boot']:.0%}", flush=True)
    seconds = time.perf_counter() - start
    ratio = harness.truth(next(iter(harness.FAMILIES)), harness.positions())[0].holdout_ratio
    own = [row for row in rows if row["pairs"] == harness.PAIRS[0]]
    own_rows = "".join(f"| {row['family']} | {row['own_deviation']:.3f} | {row['own_holdout']:.3f} | "
                       f"{verdict(row['own'])} | {verdict(row['own_old'])} |\n" for row in own)
    named = lambda start: next(row for row in own if row["family"].startswith(start))  # noqa: E731
    p_row, knee, power = named("P / (P + t)"), named("knee 0.4 -> 0.8"), named("power law")
    common = dict(tolerance=harness.POWER_LAW_TOLERANCE, n_boot=args.n_boot, claim_boot=CLAIM_BOOT,
                  wrong_max=harness.WRONG_MAX, undecided_max=harness.UNDECIDED_MAX)
    text = HEADER.format(command=command, seconds=seconds, test_draws=harness.TEST_DRAWS, t_min=harness.T_MIN,
                         t_max=harness.T_MAX, ratio=ratio, holdout_tolerance=harness.POWER_LAW_TOLERANCE * ratio,
                         own_rows=own_rows, p_deviation=p_row["own_deviation"], t0=harness.T0,
                         knee_ratio=knee["own_holdout"] / knee["own_deviation"],
                         within_names=", ".join(f"`{r['family']}`" for r in own if r["own"]),
                         beyond_names=", ".join(f"`{r['family']}`" for r in own if r["own"] is False),
                         log2_deviation=named("(log t)^2")["own_deviation"], p_truth=p_row["deviation"],
                         power_truth=power["deviation"], power_holdout=power["holdout"],
                         exponent_sd=harness.EXPONENT_SD, level_sd=harness.LOG_LEVEL_SD, position_sd=harness.POSITION_SD,
                         draws=args.draws, **common)
    for row in rows:
        text += (f"| {row['family']} | {row['pairs']} | {verdict(row['truth'])} | {verdict(row['own'])} | "
                 f"{row['deviation']:.3f} | {row['holdout']:.3f} | {row['distance']:+.1f} | {row['wrong']:.1%} | "
                 f"{row['undecided']:.1%} | {row['same_at_check_boot']:.0%} ({row['checked_undecided'][0]:.0%}, "
                 f"{row['checked_undecided'][1]:.0%}) | {'; '.join(harness.failures(row)) or '-'} | "
                 f"{verdict(row['old_truth'])}, {row['old_wrong']:.1%}, {row['old_undecided']:.1%} |\n")
    z = norm.ppf(1 - harness.UNDECIDED_MAX)
    reach = {n: (student_t.ppf(0.975, n - 1) + z, student_t.ppf(1 - 0.05 / (2 * 15), n - 1) + z) for n in harness.PAIRS}
    broken = [row for row in rows if harness.failures(row)]
    beyond_reach = [row for row in broken if row["distance"] >= reach[row["pairs"]][0 if row["truth"] else 1]]
    listed = {(row["family"], row["pairs"]) for row in broken}
    text += FOOTER.format(max_wrong=max(row["wrong"] for row in rows), rows=len(rows), broken=len(broken),
                          listed=", listed in the test's `KNOWN_UNDECIDED`" if listed == set(harness.KNOWN_UNDECIDED)
                          else f" (the test's `KNOWN_UNDECIDED` differs: {sorted(listed ^ set(harness.KNOWN_UNDECIDED))})",
                          nearer=len(broken) - len(beyond_reach),
                          exceptions="" if not beyond_reach else "; not: " + ", ".join(
                              f"{row['family']} at {row['pairs']} pairs ({row['undecided']:.1%} at {row['distance']:.1f} SE)"
                              for row in beyond_reach),
                          reach_8=reach[harness.PAIRS[0]][0], reach_16=reach[harness.PAIRS[1]][0],
                          beyond_8=reach[harness.PAIRS[0]][1], beyond_16=reach[harness.PAIRS[1]][1],
                          min_same=min(row["same_at_check_boot"] for row in rows), power_holdout=power["holdout"],
                          wiggle_old=named("t^-0.6 (1")["old_undecided"], wiggle_new=named("t^-0.6 (1")["undecided"],
                          **common)
    args.out.write_text(text)
    print(f"wrote {args.out} ({seconds:.0f} s)")


if __name__ == "__main__":
    main()
