"""The local agent: device discovery (this machine via psutil, a ``fake`` YAML backend,
simulated demo nodes) and the process executor that runs bound tasks (it implements
:mod:`hetsched.drivers.executor`)."""

from hetsched.agent.discovery import discover_local, load_fake_devices
from hetsched.agent.executor import Executor, TaskHandle

__all__ = ["Executor", "TaskHandle", "discover_local", "load_fake_devices"]
