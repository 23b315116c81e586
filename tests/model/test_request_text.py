"""A task's request reads in the units a job file is written in, wherever an explanation
or a refusal quotes it (``no node could ever hold a task (cpu 1, memory 1Gi, 8x gpu)``)."""

from __future__ import annotations

import pytest

from hetsched.model.job import DeviceChoice, DeviceRequest, TaskRequest


@pytest.mark.parametrize(
    ("cpu_milli", "memory_mib", "devices", "text"),
    [
        (1000, 1024, (DeviceRequest((DeviceChoice("gpu", 8),)),), "cpu 1, memory 1Gi, 8x gpu"),
        (32000, 262144, (), "cpu 32, memory 256Gi"),
        (500, 1536, (), "cpu 500m, memory 1536Mi"),
        (
            100,
            4096,
            (DeviceRequest((DeviceChoice("gpu", 1, 300),)),),
            "cpu 100m, memory 4Gi, 300/1000 of 1 gpu",
        ),
        (0, 0, (), "cpu 0, memory 0Mi"),
    ],
)
def test_a_request_reads_in_a_job_files_units(
    cpu_milli: int, memory_mib: int, devices: tuple[DeviceRequest, ...], text: str
) -> None:
    assert TaskRequest(cpu_milli, memory_mib, devices).describe() == text
