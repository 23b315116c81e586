"""``hetsched up`` takes its start-up heap out of the cyclic collector's sight (a full
collection over it stalled a turn for 45-75 ms), without freezing garbage. Run in a child
interpreter: freezing is process-wide and must not reach the test process."""

import subprocess
import sys
import textwrap

_CHILD = textwrap.dedent(
    """
    import gc, weakref
    from hetsched.service.server import _freeze_heap

    class Node:
        pass

    kept = Node()
    garbage = Node()
    garbage.me = garbage  # a cycle only the collector can free
    dead = weakref.ref(garbage)
    del garbage
    gc.disable()  # no collection but _freeze_heap's own
    _freeze_heap()
    frozen = gc.get_freeze_count()
    print(dead() is None, frozen > 1000, kept in gc.get_objects(), gc.get_objects(2) == [])
    """
)


def test_start_up_heap_is_frozen_after_its_garbage_is_collected() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD], capture_output=True, text=True, check=True, timeout=60
    )
    # garbage collected, not frozen; the live heap frozen: nothing left in the oldest
    # generation, and objects alive before the freeze are no longer tracked by any generation
    assert done.stdout.split() == ["True", "True", "False", "True"]
