"""Reproductions of published experiments, run on the simulation engine and the core.

Each module declares its workload, cluster, policies and the metrics it reports, and is
imported directly (a command loads only the experiment it runs):

- ``openb``: the fragmentation study of FGD (USENIX ATC '23) on the Alibaba GPU trace
  v2023: pods placed one by one under each policy, GPU fragmentation measured at arrival
  points; ``openb_bound`` and ``openb_limit`` (what any placement could do),
  ``openb_defrag`` (moving placed pods), ``openb_report`` (the grid, its table and plots);
- ``gavel``: one point of Gavel's continuous experiment (OSDI '20): Gavel's job stream in
  the engine's round mode on a V100/P100/K80 cluster, under the round policies;
- ``round_modes``: the same jobs in the engine's round mode and in the core's round mode
  (a profile's ``rounds``), side by side;
- ``philly``: a Philly-like stream (Gavel's GPU-count mix, Philly's runtimes) replayed with
  departures under the core's queue policies;
- ``alibaba_pai``: the same kind of stream on the machines of the Alibaba PAI 2020 trace.

Trace loaders (``hetsched.sim.alibaba``, ``gavel``, ``philly``), workload generators and
the metrics and reports stay in :mod:`hetsched.sim`.
"""
