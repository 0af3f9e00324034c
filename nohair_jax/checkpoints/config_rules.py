"""What every family's config rule shares: a required setting read, unsupported settings refused by name."""

from __future__ import annotations

from nohair_jax.metadata import CheckpointError

CONFIG_FILE = "config.json"


def get(settings: dict, key: str):
    """settings[key], or CheckpointError naming the key (config.json lacks a setting we need)."""
    if settings.get(key) is None:
        raise CheckpointError(f"{CONFIG_FILE} has no {key!r}")
    return settings[key]


def refuse(*checks: tuple[bool, str]) -> None:
    """CheckpointError naming every setting whose check is true (settings we do not compute)."""
    problems = [message for bad, message in checks if bad]
    if problems:
        raise CheckpointError(f"unsupported settings in {CONFIG_FILE}: " + "; ".join(problems))
