"""The control plane: one HTTP API, one store, one turn loop, shared by ``hetsched up`` and
``hetsched federation up``.

Events come in (the API's submissions and cancellations, node changes, task exits), one
loop thread turns them into the core's actions, commits them to the store, then has its
executor carry them out. What differs between the two is the executor: ``hetsched up``
runs tasks as processes (``hetsched.service``: local, or agents on Ray nodes), a
federation runs each task as a job on a member cluster (``hetsched.federation``). Both
assemble the parts exported here and import nothing else from this package.

- :class:`Store` (``storage/``): the source of truth, SQLite or PostgreSQL, migrated by
  alembic; :class:`Service` and :func:`create_app` (``api/``): the routes;
- :class:`ControlLoop` (``loop.py``): the turn loop, parametrized by a :class:`Runner`
  (``runner.py``), where the tasks run: :class:`ProcessRunner` (``processes.py``) for
  process executors, the federation's member runner for members; :class:`TurnPlanner`
  (``planner.py``): one turn on paper; :class:`TurnFaults`, :class:`LoopMetrics`: what
  it does about failed turns and what it counts;
- :func:`recover` (``recovery.py``): the core rebuilt from the store after a restart.
"""

from hetsched.controlplane.api.app import create_app
from hetsched.controlplane.api.auth import Authenticator, RateLimiter
from hetsched.controlplane.api.standby import ROLE_HEADER, standby_app
from hetsched.controlplane.checkpointing import CheckpointProtocol
from hetsched.controlplane.context import Service
from hetsched.controlplane.faults import TurnFaults
from hetsched.controlplane.fencing import Fencing
from hetsched.controlplane.history import record_start
from hetsched.controlplane.home import default_home
from hetsched.controlplane.leadership import Fenced, Held, Keeper, LeaseBook
from hetsched.controlplane.loop import ControlLoop
from hetsched.controlplane.loopmetrics import LoopMetrics
from hetsched.controlplane.pairing import (
    LOST,
    Leader,
    holder_id,
    require_shared_store,
    run_pair,
    serve_as_pair,
)
from hetsched.controlplane.planner import TurnPlan, TurnPlanner
from hetsched.controlplane.processes import ProcessRunner
from hetsched.controlplane.queues import load_queues
from hetsched.controlplane.recovery import RecoveryError
from hetsched.controlplane.runner import Before, LoopHandle, Runner
from hetsched.controlplane.schemas import Feasibility, SubmitSpec, Unsatisfiable, from_stored
from hetsched.controlplane.serving import api_server, quiet_signals
from hetsched.controlplane.speedlearn import SpeedLearner
from hetsched.controlplane.storage.integrity import StoreRefused, open_checked, write_durably
from hetsched.controlplane.storage.store import Store
from hetsched.controlplane.testing import free_port, serve
from hetsched.controlplane.utilization import SIMULATED_LABEL
from hetsched.controlplane.views import node_view, quota_view

__all__ = [
    "LOST",
    "ROLE_HEADER",
    "SIMULATED_LABEL",
    "Authenticator",
    "Before",
    "CheckpointProtocol",
    "ControlLoop",
    "Feasibility",
    "Fenced",
    "Fencing",
    "Held",
    "Keeper",
    "Leader",
    "LeaseBook",
    "LoopHandle",
    "LoopMetrics",
    "ProcessRunner",
    "RateLimiter",
    "RecoveryError",
    "Runner",
    "Service",
    "SpeedLearner",
    "Store",
    "StoreRefused",
    "SubmitSpec",
    "TurnFaults",
    "TurnPlan",
    "TurnPlanner",
    "Unsatisfiable",
    "api_server",
    "create_app",
    "default_home",
    "free_port",
    "from_stored",
    "holder_id",
    "load_queues",
    "node_view",
    "open_checked",
    "quiet_signals",
    "quota_view",
    "record_start",
    "require_shared_store",
    "run_pair",
    "serve",
    "serve_as_pair",
    "standby_app",
    "write_durably",
]
