"""The command line: ``hetsched`` and its command groups."""
