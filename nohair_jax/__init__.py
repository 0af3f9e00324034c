"""nohair_jax: how long a prompt keeps steering a transformer, measured, fitted and explained.

    import nohair_jax as nh
    from flax import nnx
    cfg = nh.TransformerConfig(vocab_size=256, d_model=128, n_heads=4, n_layers=4)
    model = nh.Transformer(cfg, rngs=nnx.Rngs(0))
    off = nh.prompt_pair_offsets(model, prompts_a, prompts_b, continuations)
    fit = nh.fit_power_law(off.t, off.l2[:, -1, :])
    fit.alpha, fit.ci, fit.t_range

Every definition, and the names, shapes and units the docstrings use (N pairs, L blocks, t = 1..T
at index P + t - 1, offsets [N, L+1, T] in the units of h, KL in nats), is in docs/definitions.md;
the conventions in its section #conventions.
"""

import ast
import importlib
from pathlib import Path


def _public_names() -> tuple[dict[str, str], tuple[str, ...]]:
    """Public name -> the module that defines it, and the submodules, from the explicit imports of
    ``__init__.pyi`` (what editors and type checkers read): one list, resolved on first use (PEP 562),
    so that ``import nohair_jax`` and ``nohair --help`` do not load JAX, Flax, optax, sympy or matplotlib."""
    tree = ast.parse((Path(__file__).parent / "__init__.pyi").read_text())
    names, submodules = {}, []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == __name__:
            submodules += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names.update({alias.name: node.module.removeprefix(f"{__name__}.") for alias in node.names})
    return names, tuple(submodules)


_MODULE_OF, _SUBMODULES = _public_names()

__version__ = "0.1.0"
__all__ = sorted([*_MODULE_OF, *_SUBMODULES])


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"nohair_jax.{name}")
    if name not in _MODULE_OF:
        raise AttributeError(f"module 'nohair_jax' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"nohair_jax.{_MODULE_OF[name]}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return __all__
