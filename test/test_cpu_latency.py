"""The realtime containers' CPU wake-up latency request (PM QoS, ``/dev/cpu_dma_latency``)."""

import os
import struct

import pytest

from legged_wbc.ros.stack.composition import CPU_LATENCY_DEVICE, hold_cpu_wakeup_latency, release_cpu_wakeup_latency
from logs import Log


def _current_request_us() -> int:
    """The kernel's aggregated request: the smallest one held (reading the device needs root too)."""
    with open(CPU_LATENCY_DEVICE, "rb") as f:
        return struct.unpack("i", f.read(4))[0]


def test_a_negative_latency_asks_for_nothing():
    log = Log()
    assert hold_cpu_wakeup_latency(-1, log, device="/nonexistent/cpu_dma_latency") is None
    assert log.lines == []
    release_cpu_wakeup_latency(None)


def test_a_device_it_cannot_open_is_one_warning_and_the_run_goes_on(tmp_path):
    log = Log()
    assert hold_cpu_wakeup_latency(0, log, device=str(tmp_path / "missing" / "cpu_dma_latency")) is None
    assert len(log.lines) == 1 and log.lines[0][0] == "warning" and "cpu_dma_latency" in log.lines[0][1]


@pytest.mark.skipif(not os.path.exists(CPU_LATENCY_DEVICE) or os.geteuid() != 0,
                    reason="needs /dev/cpu_dma_latency and root")
def test_the_request_holds_while_the_descriptor_is_open():
    log = Log()
    fd = hold_cpu_wakeup_latency(7, log)
    try:
        assert fd is not None and log.lines[0][0] == "info"
        assert _current_request_us() <= 7                  # others may hold a smaller one
        assert os.readlink(f"/proc/self/fd/{fd}") == CPU_LATENCY_DEVICE
    finally:
        release_cpu_wakeup_latency(fd)
    assert not os.path.exists(f"/proc/self/fd/{fd}") or os.readlink(f"/proc/self/fd/{fd}") != CPU_LATENCY_DEVICE
