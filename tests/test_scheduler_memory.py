"""Per-client GPU memory limits in the preload library, against the stand-in driver (CPU only).

What users rely on: every allocation route (CUDA arrays, plain, 3D and mipmapped, graph
memory-allocation nodes and what stream-ordered pools keep of freed memory included; memory of
the host excluded) counts against the client's limit, an allocation that
would pass it fails with CUDA's out-of-memory error without reaching the driver, the client sees
its limit as the device's memory, frees give memory back, a limit changed while the client runs
holds from its next allocation, and a killed client's use goes back to zero.
"""

from __future__ import annotations

import pytest
from native_harness import read_log, wait_for

from orion_common.errors import OrionError
from scheduler_core import SchedulerRun, SchedulerSettings

GIB = 1 << 30
OUT_OF_MEMORY = 2  # CUDA_ERROR_OUT_OF_MEMORY
# One allocation of every kind; the pitched one is 1000 bytes wide and 2 rows, which the
# stand-in pads to 1024-byte rows: 2048 bytes.
EVERY_KIND = (
    "alloc mem 1000 alloc managed 2000 alloc pitch 1000 alloc async 3000 alloc pool 4000 "
    "alloc vmm 5000"
)
EVERY_KIND_BYTES = 1000 + 2000 + 2048 + 3000 + 4000 + 5000


def settings(policy: str = "orion") -> SchedulerSettings:
    return SchedulerSettings(
        policy=policy, sm_count=132, queue_limit_ns=1_000_000, unknown_duration_ns=1_000_000
    )


def run_client(harness, tmp_path, script: str, limit: int | None, env=None) -> tuple[str, dict]:
    """Runs ``script`` as the run's only client with ``limit``; returns its stdout and stats."""
    with SchedulerRun(settings()) as run:
        index = run.add_client("job", "be", memory_limit=limit)
        run.publish()
        result = harness.run(
            script, env={**run.client_environment(index), **(env or {})}, log=tmp_path / "job.log"
        )
        assert result.returncode == 0, result.stderr
        return result.stdout, run.stats()["job"]


def return_codes(stdout: str) -> list[int]:
    return [int(line.rsplit("rc=", 1)[1]) for line in stdout.splitlines() if " rc=" in line]


@pytest.mark.parametrize("route", ["getproc", "getproc_ptsz", "dlsym", "dlsym_ptsz"])
def test_every_allocation_route_is_counted_and_freed(harness, tmp_path, route):
    stdout, stats = run_client(harness, tmp_path, f"route {route} {EVERY_KIND} free_all", None)
    assert return_codes(stdout) == [0] * 6
    assert stats["memory_peak"] == EVERY_KIND_BYTES
    assert stats["memory_used"] == 0  # every free gave its size back
    assert stats["allocations_refused"] == 0


ARRAYS = "alloc array 1000 alloc array3d 1600 alloc mipmap 1000"
ARRAY_BYTES = 1000 + 1600 + (1000 + 500)  # a mipmapped array: every level


@pytest.mark.parametrize("route", ["getproc", "dlsym"])
def test_cuda_arrays_are_counted_and_freed(harness, tmp_path, route):
    stdout, stats = run_client(harness, tmp_path, f"route {route} {ARRAYS} free_all", None)
    assert return_codes(stdout) == [0] * 3
    assert stats["memory_peak"] == ARRAY_BYTES
    assert stats["memory_used"] == 0  # destroying each array gave its size back


def test_a_cuda_array_past_the_limit_is_refused(harness, tmp_path):
    script = "alloc array 2000 alloc array3d 1600 alloc mipmap 600 alloc mem 101"
    stdout, stats = run_client(harness, tmp_path, script, 3000)
    # 2000, then 3600 refused, then 2000 + 900 = 2900, then 3001 refused.
    assert return_codes(stdout) == [0, OUT_OF_MEMORY, 0, OUT_OF_MEMORY]
    assert stats["memory_peak"] == 2900 and stats["allocations_refused"] == 2
    driver = [e.fields[0] for e in read_log(tmp_path / "job.log") if e.kind == "alloc"]
    assert driver == ["cuArrayCreate", "cuMipmappedArrayCreate"]  # the refused never reached it


def test_a_directly_linked_program_is_counted(harness, tmp_path):
    stdout, stats = run_client(harness, tmp_path, "route direct alloc mem 4096", None)
    assert return_codes(stdout) == [0]
    assert stats["memory_peak"] == 4096
    assert stats["memory_used"] == 0  # back to zero when the process exited


def test_the_limit_refuses_exactly_past_the_boundary(harness, tmp_path):
    script = (
        "alloc mem 6000 alloc async 4000 alloc vmm 1 "  # 10000 reached exactly; then 1 too many
        "free_all alloc pool 10000 alloc managed 1 alloc pitch 1"
    )
    stdout, stats = run_client(harness, tmp_path, script, 10_000)
    assert return_codes(stdout) == [0, 0, OUT_OF_MEMORY, 0, OUT_OF_MEMORY, OUT_OF_MEMORY]
    assert stats["allocations_refused"] == 3
    assert stats["memory_peak"] == 10_000  # never past the limit
    # A refused allocation never reached the driver.
    driver_allocs = [e for e in read_log(tmp_path / "job.log") if e.kind == "alloc"]
    assert [e.fields[1] for e in driver_allocs] == ["bytes=6000", "bytes=4000", "bytes=10000"]


def test_padding_that_does_not_fit_refuses_a_pitched_allocation(harness, tmp_path):
    # 2000 bytes of rows fit a 2040-byte limit; the 2048 bytes the driver pads them to do not.
    stdout, stats = run_client(harness, tmp_path, "alloc pitch 1000 meminfo", 2040)
    assert return_codes(stdout) == [OUT_OF_MEMORY]
    assert stats["memory_peak"] == 2000  # the rows, until the padding was refused
    assert "free cuMemFree bytes=2048" in (tmp_path / "job.log").read_text()  # given back


def test_the_client_sees_its_limit_as_the_devices_memory(harness, tmp_path):
    env = {"FAKE_MEM_TOTAL": str(16 * GIB)}
    stdout, _ = run_client(harness, tmp_path, f"alloc mem {GIB} meminfo", 4 * GIB, env)
    assert f"meminfo free={3 * GIB} total={4 * GIB} device_total={4 * GIB}" in stdout
    stdout, _ = run_client(harness, tmp_path, f"alloc mem {GIB} meminfo", None, env)
    assert f"meminfo free={15 * GIB} total={16 * GIB} device_total={16 * GIB}" in stdout


def test_nvml_inside_a_limited_client_agrees_with_cuMemGetInfo(harness, tmp_path):
    # nvidia-smi and pynvml read NVML: the limit as the total, what the client uses as used.
    env = {"FAKE_MEM_TOTAL": str(16 * GIB)}
    stdout, _ = run_client(harness, tmp_path, f"alloc mem {GIB} meminfo nvml", 4 * GIB, env)
    assert f"meminfo free={3 * GIB} total={4 * GIB}" in stdout
    assert (
        f"nvml total={4 * GIB} free={3 * GIB} used={GIB} "
        f"v2 total={4 * GIB} free={3 * GIB} used={GIB}"
    ) in stdout
    # Without a limit NVML's figures are the device's own (tests/test_daemon_env_join.py: and in
    # a process that only asks NVML, which joins nothing).
    stdout, _ = run_client(harness, tmp_path, f"alloc mem {GIB} nvml", None, env)
    assert f"nvml total={16 * GIB} free={15 * GIB} used={GIB}" in stdout


def test_free_memory_is_the_smaller_of_the_devices_and_the_limits(harness, tmp_path):
    # Another process holds most of the device: what is really free is less than the limit.
    env = {"FAKE_MEM_TOTAL": str(2 * GIB)}
    stdout, _ = run_client(harness, tmp_path, f"alloc mem {GIB} meminfo", 4 * GIB, env)
    assert f"meminfo free={GIB} total={2 * GIB} device_total={2 * GIB}" in stdout


def test_a_limit_changed_while_the_client_runs_holds_from_its_next_allocation(harness, tmp_path):
    with SchedulerRun(settings()) as run:
        index = run.add_client("job", "be", memory_limit=10_000)
        run.publish()
        lowered = tmp_path / "lowered"
        process = harness.start(
            f"alloc mem 6000 say lowered? await {lowered} alloc mem 1000 free_all alloc mem 4000",
            env=run.client_environment(index),
            log=tmp_path / "job.log",
        )
        try:
            assert process.stdout.readline().strip() == "alloc mem rc=0"
            run.set_memory_limit(index, 5000)  # below what it holds: nothing is freed
            assert process.stdout.readline().strip() == "lowered?"
            assert run.stats()["job"]["memory_used"] == 6000
            lowered.touch()  # its next allocation comes after the change, however slow the test
            out, err = process.communicate(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
        assert process.returncode == 0, err
        stats = run.stats()["job"]
    assert return_codes(out) == [OUT_OF_MEMORY, 0]
    assert (stats["memory_limit"], stats["memory_peak"]) == (5000, 6000)


def test_a_killed_clients_use_goes_back_to_zero(harness, tmp_path):
    # Under `priority` no gate keeper runs, so nothing but the controller looks for dead clients.
    with SchedulerRun(settings("priority")) as run:
        index = run.add_client("job", "be", memory_limit=GIB)
        run.publish()
        result = harness.run(
            "alloc mem 5000 kill_self", env=run.client_environment(index), log=tmp_path / "j.log"
        )
        assert result.returncode != 0
        assert run.stats()["job"]["memory_used"] == 5000  # its slot still says so ...
        run.mark_gone(index, crashed=True)  # ... until the controller sees it gone
        assert run.stats()["job"]["memory_used"] == 0


def test_the_gate_keeper_finds_a_killed_client_and_returns_its_memory(harness, tmp_path):
    # Under `orion` with GPU gates the keeper looks for dead clients every few milliseconds, so
    # the use goes back to zero with no word from the controller.
    with SchedulerRun(settings()) as run:
        index = run.add_client("job", "be", memory_limit=GIB)
        run.publish()
        result = harness.run(
            "alloc mem 5000 kill_self", env=run.client_environment(index), log=tmp_path / "j.log"
        )
        assert result.returncode != 0
        wait_for(
            lambda: run.stats()["job"]["memory_used"] == 0,
            timeout_s=5,
            what="the keeper to return the dead client's use",
        )


def meminfo_free(stdout: str) -> list[int]:
    """The free figures of the script's ``meminfo`` lines, in order."""
    return [int(line.split()[1].split("=")[1]) for line in stdout.splitlines() if "meminfo" in line]


def test_a_jax_style_preallocation_takes_its_share_of_the_limit(harness, tmp_path):
    # JAX preallocates 75% of what cuMemGetInfo calls free: of the limit, not of the device.
    env = {"FAKE_MEM_TOTAL": str(16 * GIB)}
    stdout, stats = run_client(harness, tmp_path, "prealloc 75 alloc mem 1", 4 * GIB, env)
    assert return_codes(stdout) == [0, 0]
    assert stats["memory_peak"] == 3 * GIB + 1 and stats["allocations_refused"] == 0


def test_host_memory_of_the_virtual_memory_api_is_not_counted(harness, tmp_path):
    script = "alloc vmm_host 50000 alloc vmm 1000 alloc vmm 1001 meminfo free_all"
    stdout, stats = run_client(harness, tmp_path, script, 2000)
    assert return_codes(stdout) == [0, 0, OUT_OF_MEMORY]  # only the device's 1000 counted
    assert meminfo_free(stdout) == [1000]
    assert stats["memory_peak"] == 1000 and stats["memory_used"] == 0
    assert "alloc_host cuMemCreate bytes=50000" in (tmp_path / "job.log").read_text()


GRAPHS = (
    "func k 1 graph_new g graph_alloc g 6000 graph_alloc g 70000 host graph_node g k 1 1 "
    "graph_try g meminfo graph_new h graph_alloc h 5000 graph_try h "
    "graph_destroy g meminfo graph_try h meminfo"
)


@pytest.mark.parametrize("route", ["getproc", "dlsym"])
def test_graph_allocation_nodes_count_from_instantiation_to_destruction(harness, tmp_path, route):
    stdout, stats = run_client(harness, tmp_path, f"route {route} {GRAPHS}", 10_000)
    # g's 6000 device bytes (the host node is not counted); h's 5000 do not fit beside them
    # until g's executable is destroyed.
    assert return_codes(stdout) == [0, OUT_OF_MEMORY, 0]
    assert meminfo_free(stdout) == [4000, 10_000, 5000]
    assert stats["memory_peak"] == 6000 and stats["allocations_refused"] == 1
    instantiated = [e for e in read_log(tmp_path / "job.log") if e.kind == "graph_instantiate"]
    assert len(instantiated) == 2  # the refused instantiation never reached the driver


def test_an_allocation_into_a_captured_stream_waits_for_its_graph(harness, tmp_path):
    # Captured, it is a node of the graph being made: counted when that graph is instantiated.
    script = "stream cap capture alloc_stream cap alloc async 5000 meminfo free_all"
    stdout, stats = run_client(harness, tmp_path, script, 1000)
    assert return_codes(stdout) == [0]
    assert meminfo_free(stdout) == [1000]
    assert stats["memory_peak"] == 0


def test_a_pool_keeps_freed_memory_counted_up_to_its_release_threshold(harness, tmp_path):
    script = (
        "pool_new p device pool_threshold p 4000 alloc_from p 3000 free_all meminfo "
        "alloc mem 7001 "  # the 3000 the pool keeps still count: refused
        "alloc_from p 2000 meminfo "  # drawn from what it keeps: nothing more counted
        "pool_trim p 0 meminfo "  # what it kept beyond its live 2000 goes back
        "free_all meminfo pool_destroy p meminfo"
    )
    stdout, stats = run_client(harness, tmp_path, script, 10_000)
    assert return_codes(stdout) == [0, 0, OUT_OF_MEMORY, 0]
    assert meminfo_free(stdout) == [7000, 7000, 8000, 8000, 10_000]
    assert stats["memory_peak"] == 3000 and stats["memory_used"] == 0


def test_the_default_pool_keeps_freed_memory_up_to_its_threshold(harness, tmp_path):
    script = (
        "alloc async 4000 free_all meminfo "  # threshold 0: given back at once
        "pool_threshold default 3000 alloc async 4000 free_all meminfo "
        "pool_threshold default 0 meminfo"
    )
    stdout, _ = run_client(harness, tmp_path, script, 10_000)
    assert return_codes(stdout) == [0, 0]
    assert meminfo_free(stdout) == [10_000, 7000, 10_000]


def test_a_pool_made_current_counts_what_cuMemAllocAsync_takes_from_it(harness, tmp_path):
    script = (
        "pool_new p device pool_threshold p 3000 pool_current p alloc async 2000 free_all meminfo"
    )
    stdout, _ = run_client(harness, tmp_path, script, 10_000)
    assert return_codes(stdout) == [0, 0]
    assert meminfo_free(stdout) == [8000]


def test_a_pool_on_the_host_is_not_counted(harness, tmp_path):
    script = "pool_new h host alloc_from h 50000 meminfo free_all pool_destroy h"
    stdout, stats = run_client(harness, tmp_path, script, 10_000)
    assert return_codes(stdout) == [0, 0]
    assert meminfo_free(stdout) == [10_000]
    assert stats["memory_peak"] == 0


MIB = 1 << 20


def test_what_a_program_grows_of_its_context_counts(harness, tmp_path):
    # The malloc heap and printf FIFO by their size beyond the driver's defaults (8 MiB, 1 MiB);
    # the stack per thread beyond 1 KiB for every thread the GPU holds (132 SMs x 2048 here).
    stack_bytes = (2048 - 1024) * 132 * 2048
    script = (
        f"ctx_limit heap {40 * MIB} meminfo ctx_limit printf {2 * MIB} meminfo "
        f"ctx_limit stack 2048 meminfo ctx_limit heap {8 * MIB} meminfo "
        f"ctx_limit heap {GIB} meminfo"
    )
    stdout, stats = run_client(harness, tmp_path, script, GIB)
    # The last heap would take the client past its limit: refused, the heap stays at its default.
    assert return_codes(stdout) == [0, 0, 0, 0, OUT_OF_MEMORY]
    after_heap = GIB - 32 * MIB
    after_printf = after_heap - MIB
    after_stack = after_printf - stack_bytes
    assert meminfo_free(stdout) == [
        after_heap,
        after_printf,
        after_stack,
        after_stack + 32 * MIB,
        after_stack + 32 * MIB,
    ]
    assert stats["allocations_refused"] == 1
    limits = [e.fields for e in read_log(tmp_path / "job.log") if e.kind == "ctx_limit"]
    assert len(limits) == 4  # the refused one never reached the driver


def test_without_a_run_allocations_pass_through(harness, tmp_path):
    result = harness.run(f"alloc mem {GIB} meminfo", env={"FAKE_MEM_TOTAL": str(2 * GIB)})
    assert result.returncode == 0, result.stderr
    assert f"meminfo free={GIB} total={2 * GIB}" in result.stdout


def test_a_memory_limit_must_be_positive():
    with SchedulerRun(settings()) as run, pytest.raises(OrionError, match="at least 1 byte"):
        run.add_client("job", "be", memory_limit=0)
