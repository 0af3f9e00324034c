"""A transformer's tokens as the particles of docs/definitions.md#token-dynamics, layer by layer.

``sublayer_outputs`` splits a pre-LN model's residual stream into each layer's attention and MLP
outputs (one Euler step of the particle system per layer: interaction plus token-wise control),
``attention_bound`` is the analogue of ``dynamics.drift_bound`` for one attention layer, and
``layer_measures`` reads the consensus measures (``nohair_jax.dynamics``) and the MLP-to-attention
ratios off every layer.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax import lax

from nohair_jax.dynamics import diameter, mean_cosine, n_clusters
from nohair_jax.model import Attention, Sublayers, Transformer



def sublayer_outputs(model: Transformer, tokens: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """A pre-LN model's residual stream split by sublayer: tokens int ``[B, T]`` ->
    ``hidden`` ``[L+1, B, T, D]`` (``ForwardOutput.hidden``), ``attn`` and ``mlp`` ``[L, B, T, D]``
    with ``hidden[l + 1] = hidden[l] + attn[l] + mlp[l]`` (up to rounding): the model's own forward
    pass (``model.Sublayers``).

    In the particle picture ``attn[l]`` is the interaction and ``mlp[l]`` the token-wise control
    of one Euler step of size 1.
    """
    if not model.config.layout.pre_ln:
        raise ValueError(f"sublayer outputs are defined here for pre-LN models, got {model.config.layout}")
    out = model(tokens, probe=Sublayers())
    return (out.hidden, *out.blocks)


def attention_bound(attn: Attention, y: jax.Array) -> jax.Array:
    """The analogue of ``drift_bound`` for one attention layer: ``y`` ``[B, T, D]`` -> ``[B]``.

    ``y`` is the layer's (normalised) input. Head ``h`` maps a key token ``y_j`` to
    ``y_j Wv_g Wo_h + bv_g Wo_h`` (``g`` its key/value head) and the output sums the heads' convex
    combinations plus ``bo``, so every token's attention output satisfies
    ``|a_i| <= sum_h (||Wv_g Wo_h||_2 max_j |y_j| + |bv_g Wo_h|) + |bo|``, whatever the queries
    and keys; this returns that bound per sequence.
    """
    cfg = attn.cfg
    hd, group = cfg.head_dim, cfg.n_heads // cfg.kv_heads
    wv, wo = attn.v.kernel[...], attn.o.kernel[...]  # [D, kv * hd], [H * hd, D]
    heads = jnp.arange(cfg.n_heads)
    wv_h = wv.reshape(cfg.d_model, cfg.kv_heads, hd)[:, heads // group].transpose(1, 0, 2)  # [H, D, hd]
    wo_h = wo.reshape(cfg.n_heads, hd, cfg.d_model)  # [H, hd, D]
    # ||Wv_h Wo_h||_2 from the QR factors' R (Wv_h = Q R, Wo_h^T = Q' R': the same singular values as R R'^T,
    # [hd, hd]): the [D, D] product's SVD took 0.4 s a layer on SmolLM2, this 0.05 s.
    r_v, r_o = (jnp.linalg.qr(w, mode="r") for w in (wv_h, jnp.swapaxes(wo_h, -1, -2)))
    y_max = jnp.max(jnp.linalg.norm(y, axis=-1), axis=-1)  # [B]
    bound = jnp.sum(jnp.linalg.norm(r_v @ jnp.swapaxes(r_o, -1, -2), ord=2, axis=(-2, -1))) * y_max
    if attn.v.bias is not None:
        bv_h = attn.v.bias[...].reshape(cfg.kv_heads, hd)[heads // group]  # [H, hd]
        bound = bound + jnp.sum(jnp.linalg.norm(jnp.einsum("hk,hkd->hd", bv_h, wo_h), axis=-1))
    if attn.o.bias is not None:
        bound = bound + jnp.linalg.norm(attn.o.bias[...])
    return bound


def layer_measures(model: Transformer, tokens, *, tol: float) -> dict[str, np.ndarray]:
    """The consensus measures of a pre-LN model's tokens at every depth, per sequence.

    tokens int ``[B, T]``. Returns numpy arrays: for ``hidden[l]``, ``l = 0..L`` (``[L+1, B]``):
    ``sphere_diameter`` (each token's residual vector divided by its norm, as the theory's
    tokens on the sphere), ``mean_cosine``, ``clusters`` (``n_clusters`` of the normalised tokens
    at ``tol``), ``relative_diameter`` (raw diameter over the mean token norm) and ``norm`` (mean
    token norm); for layers ``1..L`` (``[L, B]``): ``attn_norm`` and ``mlp_norm`` (mean over
    tokens of ``|attn[l]_i|`` and ``|mlp[l]_i|``) and ``attn_bound`` (``attention_bound`` on the
    layer's normalised input). One compiled program per model structure.
    """
    graphdef, state = nnx.split(model)
    out, hidden = _token_measures(graphdef, state, jnp.asarray(tokens), tol)
    out["attn_bound"] = _attention_bounds(graphdef, state, hidden)
    return {name: np.asarray(v) for name, v in out.items()}


# Two programs, not one: with the attention bounds' QR factorisations (LAPACK calls) and the
# per-sequence loop in one program, XLA's CPU runtime now and then waited forever with the test
# suite's XLA flags (4 of 4 loops of calls on SmolLM2's first two blocks, each a new length, hung by
# the 22nd call; the two programs apart, none in 3 x 60 calls; with XLA's defaults none in 40).
@functools.partial(jax.jit, static_argnums=0)
def _token_measures(graphdef, state, tokens, tol) -> tuple[dict[str, jax.Array], jax.Array]:
    hidden, attn, mlp = sublayer_outputs(nnx.merge(graphdef, state), tokens)
    depth, batch, length, width = hidden.shape
    # one sequence at a time: the pairwise differences are [T, T, D]
    per_sequence = lax.map(lambda h: _sequence_measures(h, tol), hidden.reshape(-1, length, width))
    out = {name: v.reshape(depth, batch) for name, v in per_sequence.items()}
    out["attn_norm"] = jnp.linalg.norm(attn, axis=-1).mean(-1)
    out["mlp_norm"] = jnp.linalg.norm(mlp, axis=-1).mean(-1)
    return out, hidden


@functools.partial(jax.jit, static_argnums=0)
def _attention_bounds(graphdef, state, hidden) -> jax.Array:
    blocks = nnx.merge(graphdef, state).blocks
    return jnp.stack([attention_bound(block.attn, block.attention_input(hidden[layer])) for layer, block in enumerate(blocks)])


def _sequence_measures(h: jax.Array, tol) -> dict[str, jax.Array]:
    """``layer_measures``' token measures of one sequence ``h`` ``[T, D]``: scalars."""
    norms = jnp.linalg.norm(h, axis=-1)
    unit = h / norms[:, None]
    return dict(sphere_diameter=diameter(unit), mean_cosine=mean_cosine(h), clusters=n_clusters(unit, tol),
                relative_diameter=diameter(h) / norms.mean(), norm=norms.mean())
