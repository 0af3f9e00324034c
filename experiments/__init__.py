"""The experiments, one script per claim or figure; installed as ``nohair_jax.experiments`` for ``nohair reproduce``.

Each module has ``PROFILES`` (smoke, quick, full) and ``run(profile, out, ...) -> dict``, and
runs on its own as ``python experiments/<name>.py``.
"""
