"""Simulation: trace loaders, experiments and their reports, driving the same core.

Modules are imported directly (``from hetsched.sim.openb import run_openb``) so that a
command loads only what it uses. ``alibaba``: the Alibaba GPU trace v2023 (openb) loader;
``openb``: the fragmentation experiment; ``openb_report``: its grid, table and plots.
"""
