"""Token dynamics in bulk (nohair_jax.token_dynamics) against references built here."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.sparse.csgraph import connected_components

from nohair_jax import dynamics as dyn
from nohair_jax import token_dynamics as td

# ---------------------------------------------------------------------------------- ensembles


@pytest.mark.parametrize("heads", [1, 3])
def test_units_are_an_exact_time_rescaling(heads):
    # the ensemble's run at gain ratio r, step dt, against the raw system at gain r b, step dt / b
    systems = td.random_systems(4, 3, 5, 3, heads=heads)
    goal = td.cluster_goals(5, 3, 2)
    r, dt, steps = 3.0, 0.02, 60
    runs = td.simulate_systems(systems, goal, r, dt=dt, steps=steps, tol=0.1, record=(0, steps))

    @jax.jit  # one compilation for the three draws
    def raw_run(x0, Q, K, V, gain, step):
        control = dyn.cluster_control(jnp.eye(3)[:2], jnp.arange(5) % 2, gain=gain)
        return dyn.simulate(x0, Q, K, V, control=control, dt=step, steps=steps)

    for i in range(3):
        b = dyn.drift_bound(systems.V[i])
        raw = raw_run(systems.x0[i], systems.Q[i], systems.K[i], systems.V[i], r * b, dt / b)
        np.testing.assert_allclose(runs.states[i, -1], np.asarray(raw[-1]), atol=2e-5)
        np.testing.assert_allclose(runs.diameter[i], np.asarray(dyn.diameter(raw)), atol=2e-5)
        np.testing.assert_allclose(runs.distance[i], np.asarray(dyn.distance_to(raw, goal)), atol=2e-5)
    np.testing.assert_allclose(runs.t, np.arange(steps + 1) * dt)
    assert runs.states.shape == (3, 2, 5, 3) and runs.clusters.shape == (3, 2)


def test_random_systems_shapes_and_sphere():
    s1, s4 = td.random_systems(0, 7, 5, 4), td.random_systems(0, 7, 5, 4, heads=4)
    assert s1.Q.shape == (7, 4, 4) and s4.V.shape == (7, 4, 4, 4)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(s1.x0), axis=-1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(s1.x0), np.asarray(s4.x0))  # the same tokens whatever the heads


def test_n_clusters_is_connected_components():
    # the jittable count against scipy's graph components, on clumpy random points
    rng = np.random.default_rng(0)
    for _ in range(20):
        centres = rng.normal(size=(3, 2)) * 2
        x = centres[rng.integers(0, 3, 9)] + 0.3 * rng.normal(size=(9, 2))
        tol = rng.uniform(0.1, 1.5)
        links = np.linalg.norm(x[:, None] - x[None], axis=-1) <= tol
        expected = connected_components(links, directed=False)[0]
        assert int(jax.jit(dyn.n_clusters)(jnp.asarray(x, jnp.float32), tol)) == expected


def test_first_time_below_and_summarise_by_hand():
    t = np.array([0.0, 0.5, 1.0, 1.5])
    series = np.array([[3.0, 0.05, 0.2, 0.01], [3.0, 2.0, 1.0, 0.5], [0.01, 0.01, 0.01, 0.01]])
    np.testing.assert_array_equal(td.first_time_below(series, t, 0.1), [0.5, np.nan, 0.0])
    goal = td.cluster_goals(2, 2, 1)
    x0 = np.array([[[1.0, 0.0], [-1.0, 0.0]]] * 3)  # token 2 starts at the antipode of e_1
    clusters = np.array([[2, 1], [2, 2], [1, 1]])
    runs = td.Runs(t, series, series, series, np.array([0, 3]), clusters, np.stack([x0, x0], 1))
    s = td.summarise(runs, goal, gain_ratio=40.0, k=1, eps=0.1)
    assert s["reached"] == pytest.approx(2 / 3) and s["failed_draws"] == [1]
    assert s["time_to_eps"]["median"] == pytest.approx(0.25) and s["time_to_eps"]["max"] == 0.5
    assert s["bound"]["value"] == pytest.approx(0.05)
    assert s["bound"]["held"] == pytest.approx(2 / 3) and s["bound"]["draws_starting_in_antipodal_cap"] == 3
    assert s["final_clusters"]["fraction_equal_target"] == pytest.approx(2 / 3)
    assert td.summarise(runs, goal, gain_ratio=1.0, k=1, eps=0.1)["bound"] is None


def test_theory_bound():
    assert td.theory_bound(0.5, 1) is None and td.theory_bound(1.0, 2) is None
    assert td.theory_bound(4.0, 1) == pytest.approx(0.5)
    # chord of the half angle: |x - e| for x at angle arcsin(1/4) from e
    alpha = np.arcsin(0.25)
    assert td.theory_bound(4.0, 2) == pytest.approx(np.linalg.norm([np.cos(alpha) - 1, np.sin(alpha)]))


def test_transition_on_a_made_up_grid():
    rows = [dict(gain_ratio=g, eps=0.1, final=dict(median=m), reached=f)
            for g, m, f in ((0.0, 2.0, 0.1), (0.1, 1.0, 0.2), (1.0, 0.01, 0.95), (10.0, 1e-6, 1.0))]
    tr = td.transition(rows)
    assert tr["median_below_eps"] == 1.0 and tr["gain_before"] == 0.1
    assert tr["median_crossing"] == pytest.approx(10 ** -0.5)  # halfway in log-log between (0.1, 1) and (1, 0.01)
    assert (tr["reached_50"], tr["reached_90"], tr["reached_all"]) == (1.0, 1.0, 10.0)
    assert tr["theory_guarantee"] == pytest.approx(20.0)


def test_controlled_ensemble_beats_attention_alone():
    # the theory's claim on a small ensemble: above the threshold every draw reaches eps within
    # its bound 2 / r; attention alone does not on most draws over the same horizon
    systems = td.random_systems(1, 24, 8, 3)
    goal = td.cluster_goals(8, 3, 1)
    kwargs = dict(dt=0.02, steps=300, tol=0.1, record=td.record_steps(300, 10))
    control = td.summarise(td.simulate_systems(systems, goal, 40.0, **kwargs), goal, gain_ratio=40.0, k=1, eps=0.1)
    free = td.summarise(td.simulate_systems(systems, goal, 0.0, **kwargs), goal, gain_ratio=0.0, k=1, eps=0.1)
    assert control["reached"] == 1.0 and control["bound"]["held"] == 1.0
    assert free["reached"] < 0.5


def test_check_settings_names_the_bad_value():
    good = dict(draws=4, n=3, d=2, heads=1, steps=10, dt=0.1, eps=0.1)
    td.check_settings(**good, gains=[0, 1])
    for bad, message in ((dict(n=1), "n must be"), (dict(steps=0), "steps must"), (dict(dt=float("nan")), "dt must"),
                         (dict(gains=[-1.0]), "gain must"), (dict(gains=[100.0]), "RK4")):
        with pytest.raises(ValueError, match=message):
            td.check_settings(**{**good, "gains": [1.0], **bad})


def test_adversarial_search_beats_random_draws_below_the_threshold_and_never_the_bound_above_it():
    systems = td.random_systems(3, 3, 6, 3)
    settings = dict(dt=0.04, steps=250)
    below = td.adversarial_diameters(systems, 0.5, iterations=15, **settings)
    start = td.simulate_systems(systems, td.cluster_goals(6, 3, 1), 0.5, tol=0.1, record=(0,), **settings).diameter[:, -1]
    assert np.all(below >= start - 1e-6) and below.max() > start.max() + 0.1  # the ascent found worse systems
    above = td.adversarial_diameters(systems, 20.0, iterations=15, **settings)
    assert np.all(np.isfinite(above)) and above.max() <= 2 / 20  # consensus_control's bound: diameter <= 2 / r
