"""The numpy float64 reference forward pass, independent of ``nohair_jax.model``.

``ref_forward`` is written from the documented semantics (module docstring of
``nohair_jax/model.py``; docs/definitions.md#hidden-states, #offsets and #logit-bias). It reads
the parameters of a ``Transformer`` by name from
``nnx.to_pure_dict`` and re-derives every convention itself (positions, rope, the prompt logit
bias, grouped-query heads, norms, activations); nothing but the classes under test is imported
from the model. ``random_params``, ``build`` and ``random_tokens`` make the cases both sides run.
Used by tests/test_model.py and tests/test_attention.py.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np
from flax import nnx

from nohair_jax.model import Transformer

# --------------------------------------------------------------------------------------
# Parameter access
# --------------------------------------------------------------------------------------


def flat_leaves(tree, prefix=()):
    """Flatten a nested pure dict into {path tuple (str keys): array}."""
    out = {}
    for key, value in tree.items():
        path = prefix + (str(key),)
        if isinstance(value, dict):
            out.update(flat_leaves(value, path))
        else:
            out[path] = value
    return out


def unflatten(flat):
    tree = {}
    for path, value in flat.items():
        node = tree
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return tree


class Params:
    """Read-only parameter access by dotted name, recording what was read.

    ``p("blocks.0.attn.q.kernel")`` returns a float64 numpy array; ``p.get(name)`` returns
    None for an absent parameter (e.g. a bias the config turns off).
    """

    def __init__(self, pure_dict):
        self._flat = {".".join(path): np.asarray(v, dtype=np.float64) for path, v in flat_leaves(pure_dict).items()}
        self.used: set[str] = set()

    def __call__(self, name):
        value = self._flat[name]  # KeyError: the documented layout is not there
        self.used.add(name)
        return value

    def get(self, name):
        return self(name) if name in self._flat else None

    @property
    def names(self):
        return set(self._flat)


# --------------------------------------------------------------------------------------
# The numpy float64 reference
# --------------------------------------------------------------------------------------

_erf = np.vectorize(math.erf, otypes=[np.float64])


def ref_gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def ref_gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def ref_silu(x):
    return x / (1.0 + np.exp(-x))


def ref_linear(p, name, x):
    y = x @ p(f"{name}.kernel")  # kernels are stored (in, out)
    bias = p.get(f"{name}.bias")
    return y if bias is None else y + bias


def ref_norm(cfg, p, name, x):
    """Returns (normalised x, scale of the input): std (layernorm) or rms (rmsnorm), no eps."""
    if cfg.norm == "layernorm":
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1)
        y = (x - mean) / np.sqrt(var + cfg.norm_eps)[..., None]
        scale = np.sqrt(var)
    else:
        ms = (x**2).mean(-1)
        y = x / np.sqrt(ms + cfg.norm_eps)[..., None]
        scale = np.sqrt(ms)
    y = y * p(f"{name}.scale")
    bias = p.get(f"{name}.bias")
    if bias is not None:
        y = y + bias
    return y, scale


def ref_sinusoidal(length, d_model):
    """Vaswani et al.: pe[pos, 2i] = sin(pos / 10000^(2i/D)), pe[pos, 2i+1] = cos(same)."""
    table = np.zeros((length, d_model))
    for pos in range(length):
        for feature in range(d_model):
            i = feature // 2
            angle = pos / 10000.0 ** (2 * i / d_model)
            table[pos, feature] = math.sin(angle) if feature % 2 == 0 else math.cos(angle)
    return table


def ref_rope(x, theta, fraction=1.0):
    """x [T, hd] at positions 0..T-1, Llama / Hugging Face half-split convention, on the first
    int(hd * fraction) features (GPT-NeoX's partial rotary); the others pass unchanged."""
    length, hd = x.shape
    r = int(hd * fraction)
    half = r // 2
    inv_freq = np.array([theta ** (-2.0 * i / r) for i in range(half)])
    angles = np.arange(length, dtype=np.float64)[:, None] * inv_freq[None, :]
    angles = np.concatenate([angles, angles], axis=-1)  # [f, f]
    turned = x[:, :r]
    rotate_half = np.concatenate([-turned[:, half:], turned[:, :half]], axis=-1)  # [-x2, x1]
    return np.concatenate([turned * np.cos(angles) + rotate_half * np.sin(angles), x[:, r:]], axis=-1)


def ref_alibi_slopes(n):
    """Press et al.'s slopes, as their code writes them: start = 2^(-2^-(log2 n - 3)), slope h =
    start^h for a power of two n; else the closest power of two's, then every other one of twice it."""
    def power_of_2(m):
        start = 2 ** (-(2 ** -(math.log2(m) - 3)))
        return [start * start**i for i in range(m)]
    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + ref_alibi_slopes(2 * closest)[0::2][: n - closest]


def ref_rms(x, gain, eps):
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * gain


def ref_attention(cfg, p, name, x, prompt_len, layer=0):
    """x [B, T, D] -> (out [B, T, D], max |logit| [B], prompt attention [B, H, T] or None) of block ``layer``."""
    batch, length, _ = x.shape
    n_heads, hd = cfg.n_heads, cfg.head_width or cfg.d_model // cfg.n_heads
    kv_heads = n_heads if cfg.n_kv_heads is None else cfg.n_kv_heads
    group = n_heads // kv_heads
    q, k = ref_linear(p, f"{name}.q", x), ref_linear(p, f"{name}.k", x)
    if cfg.qk_norm and cfg.qk_norm_scope == "projection":  # OLMo 2: over every head's features at once
        q = ref_rms(q, p(f"{name}.q_norm.scale"), cfg.norm_eps)
        k = ref_rms(k, p(f"{name}.k_norm.scale"), cfg.norm_eps)
    q, k = q.reshape(batch, length, n_heads, hd), k.reshape(batch, length, kv_heads, hd)
    v = ref_linear(p, f"{name}.v", x).reshape(batch, length, kv_heads, hd)
    windowed = cfg.sliding_window is not None and (cfg.window_layers is None or layer in cfg.window_layers)
    theta = cfg.local_rope_theta if windowed and cfg.local_rope_theta is not None else cfg.rope_theta

    out = np.zeros((batch, length, n_heads, hd))
    max_abs = np.zeros(batch)
    to_prompt = np.zeros((batch, n_heads, length))
    causal = np.tril(np.ones((length, length), bool))
    if windowed:  # query i reads keys i - window < j <= i
        causal &= ~np.tril(np.ones((length, length), bool), -cfg.sliding_window)
    for b in range(batch):
        for h in range(n_heads):
            kv = h // group
            qh, kh, vh = q[b, :, h], k[b, :, kv], v[b, :, kv]
            if cfg.qk_norm and cfg.qk_norm_scope == "head":
                qh = ref_rms(qh, p(f"{name}.q_norm.scale"), cfg.norm_eps)
                kh = ref_rms(kh, p(f"{name}.k_norm.scale"), cfg.norm_eps)
            if cfg.position == "rope":
                qh, kh = ref_rope(qh, theta, cfg.rotary_fraction), ref_rope(kh, theta, cfg.rotary_fraction)
            scores = qh @ kh.T * (1 / math.sqrt(hd) if cfg.attn_scale is None else cfg.attn_scale)
            if cfg.attn_softcap is not None:  # Gemma 2
                scores = cfg.attn_softcap * np.tanh(scores / cfg.attn_softcap)
            max_abs[b] = max(max_abs[b], np.abs(scores[causal]).max())
            bias = cfg.prompt_logit_bias
            if bias is not None:
                scores = scores.copy()
                for qi in range(length):
                    i = qi + 1  # 1-based query position
                    if i > bias.prompt_len:
                        scores[qi, : bias.prompt_len] += bias.gamma * math.log(i / bias.prompt_len)
            if cfg.position == "alibi":
                rows, cols = np.indices((length, length))
                scores = scores - ref_alibi_slopes(n_heads)[h] * (rows - cols)
            scores = np.where(causal, scores, -np.inf)
            scores = scores - scores.max(-1, keepdims=True)
            weights = np.exp(scores)
            weights /= weights.sum(-1, keepdims=True)
            out[b, :, h] = weights @ vh
            if prompt_len is not None:
                to_prompt[b, h] = weights[:, :prompt_len].sum(-1)
    out = ref_linear(p, f"{name}.o", out.reshape(batch, length, n_heads * hd))
    return out, max_abs, (None if prompt_len is None else to_prompt)


def ref_mlp(cfg, p, name, x):
    up = ref_linear(p, f"{name}.up", x)
    if cfg.mlp == "swiglu":
        hidden = ref_silu(ref_linear(p, f"{name}.gate", x)) * up
    elif cfg.mlp == "geglu":
        hidden = ref_gelu_tanh(ref_linear(p, f"{name}.gate", x)) * up
    elif cfg.mlp == "relu":
        hidden = np.maximum(up, 0.0)
    elif cfg.mlp == "gelu":
        hidden = ref_gelu(up)
    elif cfg.mlp == "gelu_tanh":
        hidden = ref_gelu_tanh(up)
    else:
        raise AssertionError(cfg.mlp)
    return ref_linear(p, f"{name}.down", hidden)


def ref_forward(cfg, p, tokens, prompt_len=None):
    """Numpy float64 forward: dict(logits [B,T,V], hidden [L+1,B,T,D], norm_scale, max_abs_logit,
    prompt_attention, attn and mlp [L,B,T,D]: each block's sublayer outputs before the residual add)."""
    tokens = np.asarray(tokens)
    _, length = tokens.shape
    x = p("embed.embedding")[tokens] * cfg.embed_scale
    if cfg.position == "learned":
        x = x + p("pos_embed.embedding")[np.arange(length)][None]
    elif cfg.position == "sinusoidal":
        x = x + ref_sinusoidal(length, cfg.d_model)[None]

    hidden, scales, max_abs, to_prompt, attn, mlp = [x], [], [], [], [], []
    for layer in range(cfg.n_layers):
        name = f"blocks.{layer}"
        if cfg.norm_placement == "post":
            a, m, pa = ref_attention(cfg, p, f"{name}.attn", x, prompt_len, layer)
            x, s_attn = ref_norm(cfg, p, f"{name}.attn_norm", x + a)
            u = ref_mlp(cfg, p, f"{name}.mlp", x)
            x, s_mlp = ref_norm(cfg, p, f"{name}.mlp_norm", x + u)
            scales += [s_attn, s_mlp]
        else:  # pre: x + f(N(x)); output (OLMo 2): x + N'(f(x)); sandwich (Gemma): x + N'(f(N(x)))
            before, after = cfg.norm_placement in ("pre", "sandwich"), cfg.norm_placement in ("output", "sandwich")

            def sublayer(f, norm, y):  # f: y -> (output, *what else it returns)
                if before:
                    y, s = ref_norm(cfg, p, f"{name}.{norm}_norm", y)
                    scales.append(s)
                out, *rest = f(y)
                if after:
                    out, s = ref_norm(cfg, p, f"{name}.{norm}_out_norm", out)
                    scales.append(s)
                return out, *rest

            a, m, pa = sublayer(lambda y: ref_attention(cfg, p, f"{name}.attn", y, prompt_len, layer), "attn", x)
            # GPT-NeoX: both sublayers read the block's input
            (u,) = sublayer(lambda y: (ref_mlp(cfg, p, f"{name}.mlp", y),), "mlp", x if cfg.parallel_residual else x + a)
            x = x + a + u
        hidden.append(x)
        attn.append(a)
        mlp.append(u)
        max_abs.append(m)
        to_prompt.append(pa)

    y = x
    if cfg.final_norm:
        y, s_final = ref_norm(cfg, p, "final_norm", x)
        scales.append(s_final)
    logits = y @ p("embed.embedding").T if cfg.tied_embeddings else y @ p("lm_head.kernel")
    if cfg.final_softcap is not None:  # Gemma 2
        logits = cfg.final_softcap * np.tanh(logits / cfg.final_softcap)
    return dict(
        logits=logits,
        hidden=np.stack(hidden),
        norm_scale=np.stack(scales),
        max_abs_logit=np.stack(max_abs),
        prompt_attention=None if prompt_len is None else np.stack(to_prompt),
        attn=np.stack(attn),
        mlp=np.stack(mlp),
    )


# --------------------------------------------------------------------------------------
# Models with random, non-trivial parameters
# --------------------------------------------------------------------------------------


def abstract_model(cfg):
    """(graphdef, abstract state) without running the initialisers (fast)."""
    return nnx.split(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0))))


def random_params(cfg, seed):
    """Every parameter re-drawn from a normal, as a nested dict of float64 numpy arrays whose
    values are exactly representable in float32 (float32 and float64 models then hold
    identical parameters, and the float32 comparison measures only arithmetic error)."""
    _, state = abstract_model(dataclasses.replace(cfg, dtype="float32"))  # shapes only
    flat = flat_leaves(nnx.to_pure_dict(state))
    rng = np.random.default_rng(seed)
    new = {}
    for path in sorted(flat):
        shape = tuple(flat[path].shape)
        leaf, owner = path[-1], path[-2]
        if leaf == "scale":  # norm gains: around 1, size and sign varied
            value = 1.0 + 0.5 * rng.standard_normal(shape)
        elif leaf == "bias":
            value = 0.3 * rng.standard_normal(shape)
        elif leaf == "embedding":
            value = rng.standard_normal(shape)
        elif leaf == "kernel":
            std = 1.0 / math.sqrt(shape[0])
            if owner in ("q", "k"):
                std *= 1.6  # attention logits of order a few: far from uniform attention
            value = std * rng.standard_normal(shape)
        else:
            raise AssertionError(f"unexpected parameter {'.'.join(path)}")
        new[path] = value.astype(np.float32).astype(np.float64)
    return unflatten(new)


def _int_keys(new, template):
    """Give ``new`` (str keys) the key types of ``template`` (nnx.List indices are ints)."""
    out = {}
    for key, value in template.items():
        sub = new[str(key)]
        out[key] = _int_keys(sub, value) if isinstance(value, dict) else sub
    return out


def build(cfg, params, dtype):
    """A Transformer for ``cfg`` holding ``params`` as ``dtype`` arrays (float64: call inside
    ``jax.enable_x64(True)``). With ``cfg.dtype="float32"`` and ``dtype=float64`` this is the
    cast-the-state path (see ``test_float64_cast_state_matches_reference``)."""
    graphdef, state = abstract_model(cfg)
    # device_put of numpy arrays of the dtype: jnp.asarray(value, dtype) compiled a conversion per shape
    values = {path: jax.device_put(np.asarray(value, dtype=dtype)) for path, value in flat_leaves(params).items()}
    nnx.replace_by_pure_dict(state, _int_keys(unflatten(values), nnx.to_pure_dict(state)))
    return nnx.merge(graphdef, state)


def random_tokens(cfg, batch, length, seed):
    return np.random.default_rng(seed).integers(0, cfg.vocab_size, size=(batch, length))
