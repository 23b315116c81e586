"""The simulation engine: one event loop on a virtual clock, in two modes.

- :mod:`.loop`: the one event loop (the clock and its agenda) both modes run on;
- :mod:`.event_mode`: the scheduling core fed events (``Simulator``: ``sim replay``, the
  openb study, the determinism property against the service); the core's own round-based
  allocation (a profile's ``rounds`` section) runs in this mode;
- :mod:`.round_mode`: Gavel's rounds on per-model device counts, the policies of
  :mod:`hetsched.rounds` deciding each round (``RoundSimulator``: ``sim gavel``,
  ``sim replay --rounds``), with :mod:`.round_results` its outcomes and :mod:`.packing`
  its space sharing;
- :mod:`.processes`: the event-driven mode's executor (simulated processes);
- :mod:`.run`: what an event-driven run takes and gives.

The package exports the event-driven mode; the round mode (which loads the round policies'
solvers) is imported from :mod:`.round_mode`.
"""

from hetsched.sim.accounting import TimeSeries, device_label
from hetsched.sim.engine.event_mode import Simulator
from hetsched.sim.engine.loop import EventLoop
from hetsched.sim.engine.run import ClusterChange, CoreFactory, EngineConfig, Progress, SimResult
from hetsched.sim.outcomes import JobOutcome

__all__ = [
    "ClusterChange",
    "CoreFactory",
    "EngineConfig",
    "EventLoop",
    "JobOutcome",
    "Progress",
    "SimResult",
    "Simulator",
    "TimeSeries",
    "device_label",
]
