"""The share a shared slot reports follows the configured slots per device, everywhere:
the plugin's Allocate is called here through the OFFICIAL device plugin proto (compiled at
test time, see official.py), for a slot nobody assigned (no scheduler assignment waits)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from hetsched.k8s.deviceplugin.matching import slot_share
from hetsched.k8s.deviceplugin.plugin import socket_name
from k8s.dprig import SHARED, Rig, make_rig
from k8s.official import api


@pytest.fixture
def rig_of(short_dir: Path) -> Iterator[list[Rig]]:
    made: list[Rig] = []
    yield made
    for rig in made:
        rig.plugin.stop()
        rig.kubelet.stop()


def _allocate(rig: Rig, ids: list[str]) -> dict[str, str]:
    official = api("deviceplugin/v1beta1/api.proto")
    container = official.message("ContainerAllocateRequest")(devices_ids=ids)
    request = official.message("AllocateRequest")(container_requests=[container])
    with grpc.insecure_channel(f"unix://{rig.dir / socket_name(SHARED)}") as channel:
        answer = official.unary(channel, "DevicePlugin", "Allocate")(request, timeout=10)
    (response,) = answer.container_responses
    return dict(response.envs)


@pytest.mark.parametrize(
    ("slots", "ids", "share", "mps"),
    [
        (4, ["gpu0::1"], "250", "25"),
        (4, ["gpu0::1", "gpu0::2"], "500", "50"),
        (10, ["gpu1::0"], "100", "10"),
        (2, ["gpu2::1"], "500", "50"),
        (3, ["gpu3::0"], "333", "34"),
        (8, ["gpu0::0", "gpu0::3", "gpu0::7"], "375", "38"),
    ],
)
def test_an_unassigned_slot_is_its_part_of_the_device(
    short_dir: Path, rig_of: list[Rig], slots: int, ids: list[str], share: str, mps: str
) -> None:
    api("deviceplugin/v1beta1/api.proto")  # skips without the official protos
    rig = make_rig(short_dir, slots=slots)
    rig_of.append(rig)
    rig.kubelet.wait_list(SHARED, lambda listed: len(listed) == 4 * slots, "the slots listed")
    envs = _allocate(rig, ids)
    assert envs["HETSCHED_DEVICE_SHARE"] == share
    assert envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == mps
    # 80 GiB devices: the memory share follows too
    assert envs["HETSCHED_DEVICE_MEMORY_MIB"] == str(80 * 1024 * int(share) // 1000)


@pytest.mark.parametrize(
    ("count", "slots", "share"),
    [(1, 4, 250), (4, 4, 1000), (1, 10, 100), (1, 3, 333), (2, 3, 666), (5, 4, 1000)],
)
def test_slot_share(count: int, slots: int, share: int) -> None:
    assert slot_share(count, slots) == share
