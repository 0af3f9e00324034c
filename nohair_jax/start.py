"""The ``nohair`` program's first instant: from here on Ctrl-C (SIGINT) and SIGTERM end it in one
line with the signal's exit code (130, 143), the import of the command line (JAX and the rest)
included. Before this module runs stand only the interpreter's own start-up and ``nohair_jax``'s
import-light ``__init__``.
"""

import os
import signal
import sys

from nohair_jax.interrupts import Terminated, interrupt_on


def console() -> None:
    """Install the handlers (``interrupts.interrupt_on``), import the command line, run it (``cli.console``)."""
    interrupt_on(signal.SIGINT, signal.SIGTERM)
    try:
        from nohair_jax import cli
    except KeyboardInterrupt as err:
        terminated = isinstance(err, Terminated)
        print(f"\nnohair: {'terminated' if terminated else 'interrupted'} while starting; nothing was written",
              file=sys.stderr, flush=True)
        os._exit(128 + (signal.SIGTERM if terminated else signal.SIGINT))
    cli.console()
