"""The local agent: device discovery (this machine via psutil, a ``fake`` YAML backend,
simulated demo nodes) and the process executor that runs bound tasks."""

from hetsched.agent.discovery import discover_local, load_fake_devices
from hetsched.agent.executor import Executor, TaskExit, TaskHandle

__all__ = ["Executor", "TaskExit", "TaskHandle", "discover_local", "load_fake_devices"]
