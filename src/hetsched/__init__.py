"""hetsched: one scheduling core for AI work on heterogeneous hardware.

The core (``model``, ``cluster``, ``framework``, ``plugins``, ``queueing``, ``scheduler``) is
synchronous and deterministic; drivers (``sim``, the CLI) feed it events and carry out the
actions it returns.
"""

__version__ = "0.1.0"
