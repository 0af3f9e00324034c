"""Token dynamics (nohair_jax.dynamics) against references built here, independently of it."""

import itertools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.linalg import expm

from nohair_jax import dynamics as dyn


def unit(x):
    return x / jnp.linalg.norm(x, axis=-1, keepdims=True)


def sphere_points(key, n, d):
    return unit(jax.random.normal(key, (n, d)))


def draw_qkv(key, d, scale=1.0):
    kq, kk, kv = jax.random.split(key, 3)
    return tuple(scale * jax.random.normal(k, (d, d)) for k in (kq, kk, kv))


# ------------------------------------------------------------------------ uncontrolled system


def test_identity_attention_collapses_to_one_cluster():
    x0 = sphere_points(jax.random.PRNGKey(0), 8, 3)
    eye = jnp.eye(3)
    traj = dyn.simulate(x0, eye, eye, eye, dt=0.1, steps=300)
    diam = np.asarray(dyn.diameter(traj))
    assert traj.shape == (301, 8, 3)
    assert diam[0] > 1.0
    assert diam[-1] < 1e-4 * diam[0]
    assert dyn.n_clusters(traj[-1], 1e-3) == 1
    assert dyn.n_clusters(traj[0], 1e-3) == 8
    assert float(dyn.mean_cosine(traj[-1])) > 1 - 1e-6


def test_drift_by_hand():
    # reference: explicit loops over i, j with numpy, independent of the vectorised code
    rng = np.random.default_rng(3)
    n, d = 5, 4
    x = rng.normal(size=(n, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    Q, K, V = (rng.normal(size=(d, d)) for _ in range(3))
    ref = np.zeros((n, d))
    for i in range(n):
        logits = np.array([(Q @ x[i]) @ (K @ x[j]) for j in range(n)])
        w = np.exp(logits - logits.max())
        w /= w.sum()
        a = sum(w[j] * (V @ x[j]) for j in range(n))
        ref[i] = a - (x[i] @ a) * x[i]
    got = dyn.attention_drift(jnp.asarray(x), jnp.asarray(Q), jnp.asarray(K), jnp.asarray(V))
    np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-4, atol=1e-5)
    # tangent: orthogonal to each token
    np.testing.assert_allclose(np.sum(np.asarray(got) * x, axis=1), 0.0, atol=1e-5)


def test_single_token_in_rd_is_matrix_exponential():
    with jax.enable_x64(True):
        key = jax.random.PRNGKey(4)
        Q, K, V = draw_qkv(key, 4, scale=0.7)
        Q, K, V = (m.astype(jnp.float64) for m in (Q, K, V))
        x0 = jnp.array([[0.3, -1.2, 0.5, 2.0]], dtype=jnp.float64)
        T, steps = 2.0, 400
        traj = dyn.simulate(x0, Q, K, V, dt=T / steps, steps=steps, sphere=False)
        ts = jnp.arange(steps + 1) * (T / steps)
        ref = jax.vmap(lambda t: expm(V * t) @ x0[0])(ts)
        np.testing.assert_allclose(np.asarray(traj[:, 0]), np.asarray(ref), rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("sphere", [False, True])
def test_integrator_order(sphere):
    with jax.enable_x64(True):
        Q, K, V = draw_qkv(jax.random.PRNGKey(5), 3, scale=0.8)
        Q, K, V = (m.astype(jnp.float64) for m in (Q, K, V))
        x0 = sphere_points(jax.random.PRNGKey(6), 5, 3).astype(jnp.float64)
        T = 2.0
        u = lambda x, t: 0.5 * jnp.sin(t) * jnp.roll(x, 1, axis=-1)  # time-dependent control

        def final(dt, method):
            steps = int(round(T / dt))
            return dyn.simulate(x0, Q, K, V, control=u, dt=T / steps, steps=steps,
                                sphere=sphere, method=method)[-1]

        ref = final(T / 4096, "rk4")
        for method, lo, hi in (("rk4", 12.0, 20.0), ("euler", 1.7, 2.3)):
            errs = [float(jnp.max(jnp.abs(final(dt, method) - ref))) for dt in (0.1, 0.05, 0.025)]
            ratios = [errs[0] / errs[1], errs[1] / errs[2]]
            assert all(lo <= r <= hi for r in ratios), (method, errs, ratios)


def test_tokens_stay_on_sphere():
    Q, K, V = draw_qkv(jax.random.PRNGKey(7), 4, scale=1.5)
    x0 = sphere_points(jax.random.PRNGKey(8), 6, 4)
    ctrl = dyn.consensus_control(gain=3.0)
    for method in ("rk4", "euler"):
        traj = dyn.simulate(x0, Q, K, V, control=ctrl, dt=0.05, steps=200, method=method)
        np.testing.assert_allclose(np.asarray(jnp.linalg.norm(traj, axis=-1)), 1.0, atol=1e-6)


def test_multihead_identical_heads_equals_single_head():
    Q, K, V = draw_qkv(jax.random.PRNGKey(9), 3)
    x0 = sphere_points(jax.random.PRNGKey(10), 6, 3)
    stack = lambda m: jnp.stack([m] * 4)
    one = dyn.simulate(x0, Q, K, V, dt=0.05, steps=40)
    many = dyn.simulate(x0, stack(Q), stack(K), stack(V), dt=0.05, steps=40)
    np.testing.assert_allclose(np.asarray(many), np.asarray(one), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        np.asarray(dyn.attention_drift(x0, stack(Q), stack(K), stack(V), sphere=False)),
        np.asarray(dyn.attention_drift(x0, Q, K, V, sphere=False)), rtol=1e-5, atol=1e-6)
    # and distinct heads average: the drift is the mean of the per-head drifts
    Qs, Ks, Vs = (jax.random.normal(k, (3, 3, 3)) for k in jax.random.split(jax.random.PRNGKey(11), 3))
    mean = sum(dyn.attention_drift(x0, Qs[h], Ks[h], Vs[h]) for h in range(3)) / 3
    np.testing.assert_allclose(np.asarray(dyn.attention_drift(x0, Qs, Ks, Vs)), np.asarray(mean),
                               rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------ controls

N_DRAWS, N, D, STEPS = 32, 8, 3, 400


def _run_draw(key, factor, control_on=True):
    """One random (Q, K, V, x0) draw with gain = factor * ||V||_2; gain * dt = 0.1."""
    kqkv, kx = jax.random.split(key)
    Q, K, V = draw_qkv(kqkv, D)
    x0 = sphere_points(kx, N, D)
    b = dyn.drift_bound(V)
    gain = factor * b
    dt = 0.1 / gain
    ctrl = dyn.consensus_control(gain=gain) if control_on else None
    traj = dyn.simulate(x0, Q, K, V, control=ctrl, dt=dt, steps=STEPS)
    return dyn.diameter(traj[-1]), dyn.diameter(traj[0])


@jax.jit
def _batch(keys, factor):
    ctrl = jax.vmap(lambda k: _run_draw(k, factor))(keys)[0]
    free = jax.vmap(lambda k: _run_draw(k, factor, control_on=False))(keys)[0]
    return ctrl, free


KEYS = jax.random.split(jax.random.PRNGKey(12), N_DRAWS)


def test_consensus_control_above_threshold_for_random_qkv():
    eps = 0.1
    factor = 2.0 / eps * 2  # gain = 40 ||V||: the docstring's bound 2 ||V|| / gain = eps / 2
    ctrl, free = map(np.asarray, _batch(KEYS, factor))
    assert np.all(ctrl < eps / 2), ctrl
    # attention alone does not get there over the same horizon on most draws
    assert np.mean(free < eps) < 0.5, free


def test_consensus_control_too_small_gain_fails_on_some_draw():
    eps = 0.1
    weak, free = map(np.asarray, _batch(KEYS, 0.3))  # gain = 0.3 ||V||, below the threshold
    strong, _ = map(np.asarray, _batch(KEYS, 40.0))
    # some draw where attention alone does not reach consensus, nor does the weak control,
    # while the strong control does
    assert np.any((free > eps) & (weak > eps) & (strong < eps)), (weak, free)


def test_cluster_control_reaches_assigned_targets():
    targets = jnp.eye(3)[:2]  # e_1, e_2
    assignment = jnp.array([0, 1, 0, 1, 0, 1])
    Q, K, V = draw_qkv(jax.random.PRNGKey(13), 3)
    x0 = sphere_points(jax.random.PRNGKey(14), 6, 3)
    b = float(dyn.drift_bound(V))
    gain = 40 * b
    ctrl = dyn.cluster_control(targets, assignment, gain=gain)
    traj = dyn.simulate(x0, Q, K, V, control=ctrl, dt=0.1 / gain, steps=400)
    goal = targets[assignment]
    dist = np.asarray(dyn.distance_to(traj, goal))
    assert dist.shape == (401,)
    assert dist[0] > 0.5
    # each token within angle arcsin(b / gain) of its target: chord <= 2 sin(alpha / 2) <= b/gain * 1.01
    assert dist[-1] < 1.01 * b / gain * 1.5
    assert dyn.n_clusters(traj[-1], 0.2) == 2


# ------------------------------------------------------------------------------------ measures


def test_measures_by_hand():
    x = jnp.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    assert np.isclose(float(dyn.diameter(x)), 2.0)
    # cosines: (1,2)=0, (1,3)=-1, (2,3)=0 -> mean over 3 unordered pairs = -1/3
    assert np.isclose(float(dyn.mean_cosine(x)), -1.0 / 3.0, atol=1e-6)
    assert np.isclose(float(dyn.mean_cosine(jnp.array([[2.0, 0.0], [1.0, 0.0]]))), 1.0)
    # distance to targets: per-token distances 0, sqrt(2), 2 -> max 2
    tg = jnp.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    assert np.isclose(float(dyn.distance_to(x, tg)), 2.0)
    assert np.isclose(float(dyn.distance_to(x, jnp.array([0.0, 1.0]))), np.sqrt(2.0), atol=1e-6)
    # single linkage: a chain 0 - 0.5 - 1.0 links at tol 0.6 though the ends are 1.0 apart
    pts = np.array([[0.0], [0.5], [1.0], [5.0], [5.4], [9.0]])
    assert dyn.n_clusters(pts, 0.6) == 3
    assert dyn.n_clusters(pts, 0.45) == 5
    assert dyn.n_clusters(pts, 0.1) == 6
    assert dyn.n_clusters(pts, 10.0) == 1
    # on a trajectory: one value per time
    traj = jnp.stack([x, 0.5 * x, jnp.zeros_like(x)])
    np.testing.assert_allclose(np.asarray(dyn.diameter(traj)), [2.0, 1.0, 0.0], atol=1e-6)
    np.testing.assert_array_equal(dyn.n_clusters(traj, 0.6), [3, 3, 1])
    np.testing.assert_allclose(np.asarray(dyn.distance_to(traj, tg)), [2.0, 1.5, 1.0], atol=1e-6)
    # diameter against brute force on a random batch
    r = np.random.default_rng(0).normal(size=(4, 5, 3))
    brute = [max(np.linalg.norm(a - b) for a, b in itertools.product(c, c)) for c in r]
    np.testing.assert_allclose(np.asarray(dyn.diameter(jnp.asarray(r))), brute, rtol=1e-5)


def test_simulate_jit_and_vmap_over_x0_and_qkv():
    keys = jax.random.split(jax.random.PRNGKey(15), 3)
    x0s = jax.vmap(lambda k: sphere_points(k, 4, 3))(keys)
    qkvs = jax.vmap(lambda k: jnp.stack(draw_qkv(k, 3)))(keys)
    f = jax.jit(jax.vmap(lambda x, m: dyn.simulate(x, m[0], m[1], m[2], dt=0.05, steps=20)))
    batched = f(x0s, qkvs)
    assert batched.shape == (3, 21, 4, 3)
    for i in (2,):
        single = dyn.simulate(x0s[i], qkvs[i, 0], qkvs[i, 1], qkvs[i, 2], dt=0.05, steps=20)
        np.testing.assert_allclose(np.asarray(batched[i]), np.asarray(single), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError):
        dyn.simulate(x0s[0], qkvs[0, 0], qkvs[0, 1], qkvs[0, 2], dt=0.1, steps=2, method="midpoint")


class TestPureCoresUnderJitAndWithout(chex.TestCase):
    """The traceable cores of the particle system give the same numbers jitted and not
    (``chex.variants``), against float64 numpy written from docs/definitions.md#token-dynamics."""

    def _draw(self, heads=None, n=6, d=4):
        rng = np.random.default_rng(11)
        x = rng.normal(size=(n, d))
        x /= np.linalg.norm(x, axis=-1, keepdims=True)
        shape = (d, d) if heads is None else (heads, d, d)
        return x, *(rng.normal(size=shape) for _ in range(3))

    @chex.variants(with_jit=True, without_jit=True)
    def test_attention_drift_one_head_and_several(self):
        for heads in (None, 3):
            x, Q, K, V = self._draw(heads)
            heads_q, heads_k, heads_v = (m[None] if heads is None else m for m in (Q, K, V))
            want = []
            for q, k, v in zip(heads_q, heads_k, heads_v):
                logits = (x @ q.T) @ (x @ k.T).T
                w = np.exp(logits - logits.max(-1, keepdims=True))
                want.append((w / w.sum(-1, keepdims=True)) @ (x @ v.T))
            want = np.mean(want, axis=0)
            want -= np.sum(x * want, axis=-1, keepdims=True) * x  # onto the tangent space
            got = self.variant(dyn.attention_drift)(*(jnp.asarray(m, jnp.float32) for m in (x, Q, K, V)))
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)

    @chex.variants(with_jit=True, without_jit=True)
    def test_diameter_and_mean_cosine(self):
        x, *_ = self._draw()
        dist = np.linalg.norm(x[:, None] - x[None], axis=-1)
        cos = x @ x.T
        np.testing.assert_allclose(self.variant(dyn.diameter)(jnp.asarray(x, jnp.float32)), dist.max(), rtol=1e-6)
        want = (cos.sum() - np.trace(cos)) / (len(x) * (len(x) - 1))
        np.testing.assert_allclose(self.variant(dyn.mean_cosine)(jnp.asarray(x, jnp.float32)), want, rtol=1e-5)

    def test_shape_bugs_are_caught_at_the_boundary(self):
        x, Q, K, V = self._draw()
        with self.assertRaisesRegex(ValueError, "V must have shape"):
            dyn.attention_drift(jnp.asarray(x), jnp.asarray(Q), jnp.asarray(K), jnp.asarray(V[:, :3]))
        with self.assertRaisesRegex(ValueError, "x must have shape"):
            dyn.attention_drift(jnp.asarray(x[None]), jnp.asarray(Q), jnp.asarray(K), jnp.asarray(V))
