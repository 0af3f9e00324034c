"""The control threshold: final consensus against the control gain, beside the theory's threshold.

The theory (nohair_jax.dynamics.consensus_control): attention's drift is at most b = ||V||_2 per
token, so a control u = g (e_1 - x) with g > b brings every token (outside a small antipodal cap)
within angle arcsin(b / g) of e_1: final diameter <= 2 b / g. The threshold is g = b; consensus
to eps is guaranteed from g = 2 b / eps. This sweeps the gain ratio r = g / ||V|| over a log
grid, the same random draws at every gain (nohair_jax.token_dynamics.gain_sweep), and reports
where the measured transition sits: the gain at which the median final diameter crosses eps and
the gains at which 50 %, 90 % and all draws reach it, against r = 1 and r = 2 / eps.

    python experiments/control_threshold.py --out results/control_threshold     # quick: 256 draws, 14 gains
    python experiments/control_threshold.py --profile full --out results/control_threshold

Writes ``summary.json``, ``series.npz``, ``measures.png`` (measures against time per gain) and
``threshold.png`` (final diameter, fraction reached and clusters against gain).
"""

from __future__ import annotations

from pathlib import Path

from nohair_jax.results import experiment_parser
from nohair_jax.token_dynamics import gain_sweep, sweep_table

PROFILES = {
    "smoke": dict(gains=(0, 0.1, 1, 10), draws=16, n=6, d=3, heads=1, steps=200, dt=0.05, eps=0.1, records=20),
    "quick": dict(gains=(0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100), draws=256, n=16, d=3, heads=1,
                  steps=1000, dt=0.02, eps=0.1, records=60),
    "full": dict(gains=(0, 0.01, 0.014, 0.02, 0.03, 0.05, 0.07, 0.1, 0.14, 0.2, 0.3, 0.5, 0.7, 1, 1.4, 2, 3, 5, 7, 10,
                        20, 50, 100, 200), draws=2048, n=32, d=3, heads=1, steps=4000, dt=0.005, eps=0.1, records=100),
}


def run(profile: str, out: Path, seed: int = 0, settings: dict | None = None) -> dict:
    """Run the profile (``settings`` override its values), save, draw; returns the summary."""
    p = dict(PROFILES[profile], **(settings or {}))
    return gain_sweep(Path(out), **p, seed=seed, meta=dict(experiment="control_threshold", profile=profile))


def main() -> None:
    parser = experiment_parser(__doc__, "control_threshold", PROFILES)
    args = parser.parse_args()
    print(sweep_table(run(args.profile, args.out, args.seed)))


if __name__ == "__main__":
    main()
