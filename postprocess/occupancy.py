"""How many SMs a kernel needs: blocks per SM, then SMs needed and waves.

Orion's scheduler admits a best-effort kernel beside a latency-critical one only when the SMs it
would occupy fit, so ``sm_needed`` is what this package exists to compute.

Blocks per SM is the minimum of four occupancy limits. ncu reports them
(``launch__occupancy_limit_*``) and they are preferred: ncu knows the carveout the driver chose.
Where a limit is missing (``n/a``), it is computed from the GPU's own limits with CUDA's
occupancy rules, never from one GPU's constants:

- warps per block = ceil(threads / warp_size)
- registers: per-thread count rounded up to a multiple of 8; per warp = that * 32 rounded up to
  256 registers; warps limit = floor(max_registers_per_sm / registers per warp);
  blocks limit = floor(warps limit / warps per block) (no register limit at 0 registers)
- shared memory: static + dynamic + the driver's reserved 1 KiB per block, rounded up to 128
  bytes; blocks limit = floor(per-SM budget / that). The budget defaults to the largest carveout
  (``max_shared_memory_per_sm_bytes``), because the driver picks a carveout that keeps the
  occupancy that memory allows; pass ncu's ``launch__shared_mem_config_size`` to reproduce ncu.
- warps: floor(max_warps_per_sm / warps per block)
- blocks: max_blocks_per_sm

Then ``sm_needed = min(sm_count, ceil(blocks / blocks_per_sm))`` and
``waves = blocks / (blocks_per_sm * sm_count)``. Thread-block clusters (Hopper) are not modelled:
ncu's per-SM limits ignore them too.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from postprocess.ncu_csv import DeviceLimits

REGISTER_ALLOCATION_PER_THREAD = 8
"""Registers are granted per thread in multiples of 8 (every architecture since sm_30)."""
REGISTER_ALLOCATION_PER_WARP = 256
"""... and per warp in units of 256 registers."""
SHARED_MEMORY_ALLOCATION_BYTES = 128
"""Shared memory is granted per block in units of 128 bytes."""

LIMIT_COLUMNS: dict[str, str] = {
    "registers": "occupancy_limit_registers",
    "shared_memory": "occupancy_limit_shared_memory",
    "warps": "occupancy_limit_warps",
    "blocks": "occupancy_limit_blocks",
}
"""Limit name -> the kernel-table column holding ncu's value for it (blocks per SM)."""


def _round_up(values: pd.Series, multiple: int) -> pd.Series:
    return np.ceil(values / multiple) * multiple


def _float(kernels: pd.DataFrame, column: str) -> pd.Series:
    return kernels[column].astype("float64")


def threads_per_block(kernels: pd.DataFrame) -> pd.Series:
    """ncu's ``launch__block_size``, or the product of the block dimensions where it is missing."""
    product = _float(kernels, "block_x") * _float(kernels, "block_y") * _float(kernels, "block_z")
    return _float(kernels, "block_threads").fillna(product)


def blocks_per_grid(kernels: pd.DataFrame) -> pd.Series:
    """ncu's ``launch__grid_size``, or the product of the grid dimensions where it is missing."""
    product = _float(kernels, "grid_x") * _float(kernels, "grid_y") * _float(kernels, "grid_z")
    return _float(kernels, "grid_blocks").fillna(product)


def computed_occupancy_limits(
    kernels: pd.DataFrame,
    device: DeviceLimits,
    shared_memory_per_sm_bytes: int | pd.Series | None = None,
) -> pd.DataFrame:
    """The four per-SM block limits from the GPU's limits (module docstring has the formulas).

    ``shared_memory_per_sm_bytes`` is the shared-memory budget per SM: a number, a per-kernel
    Series (ncu's ``shared_memory_config_bytes``, the carveout the driver chose), or None for the
    device maximum. Returns float columns named like :data:`LIMIT_COLUMNS`; NaN where an input is
    missing (or, for registers, where the kernel uses none, so registers do not limit it).
    """
    warps_per_block = np.ceil(threads_per_block(kernels) / device.warp_size)

    registers = _float(kernels, "registers_per_thread")
    registers_per_warp = _round_up(
        _round_up(registers, REGISTER_ALLOCATION_PER_THREAD) * device.warp_size,
        REGISTER_ALLOCATION_PER_WARP,
    )
    warps_by_registers = np.floor(
        device.max_registers_per_sm / registers_per_warp.where(registers_per_warp > 0)
    )
    by_registers = np.floor(warps_by_registers / warps_per_block)

    if shared_memory_per_sm_bytes is None:
        budget: float | pd.Series = float(device.max_shared_memory_per_sm_bytes)
    elif isinstance(shared_memory_per_sm_bytes, pd.Series):
        budget = shared_memory_per_sm_bytes.astype("float64")
    else:
        budget = float(shared_memory_per_sm_bytes)
    shared_per_block = _round_up(
        _float(kernels, "static_shared_memory_bytes")
        + _float(kernels, "dynamic_shared_memory_bytes")
        + device.reserved_shared_memory_per_block_bytes,
        SHARED_MEMORY_ALLOCATION_BYTES,
    )
    by_shared_memory = np.floor(budget / shared_per_block.where(shared_per_block > 0))

    by_warps = np.floor(device.max_warps_per_sm / warps_per_block)
    by_blocks = pd.Series(float(device.max_blocks_per_sm), index=kernels.index)

    return pd.DataFrame(
        {
            LIMIT_COLUMNS["registers"]: by_registers,
            LIMIT_COLUMNS["shared_memory"]: by_shared_memory,
            LIMIT_COLUMNS["warps"]: by_warps,
            LIMIT_COLUMNS["blocks"]: by_blocks,
        },
        index=kernels.index,
    ).astype("float64")


def blocks_per_sm(kernels: pd.DataFrame, device: DeviceLimits) -> pd.Series:
    """Min of the four limits: ncu's value for each limit, the computed one where ncu had none.

    At least 1: a kernel that ran had at least one block resident on an SM, whatever the inputs
    say (this keeps ``sm_needed`` finite on inconsistent data).
    """
    reported = kernels[list(LIMIT_COLUMNS.values())].astype("float64")
    limits = reported.fillna(computed_occupancy_limits(kernels, device))
    return limits.min(axis=1, skipna=True).fillna(1.0).clip(lower=1.0).astype("int64")


def sm_needed(blocks: pd.Series, per_sm: pd.Series, sm_count: int) -> pd.Series:
    """``min(sm_count, ceil(blocks / blocks_per_sm))``: SMs the kernel's first wave occupies."""
    needed = np.ceil(blocks.astype("float64") / per_sm.astype("float64"))
    return needed.clip(upper=sm_count).astype("Int64")


def waves(blocks: pd.Series, per_sm: pd.Series, sm_count: int) -> pd.Series:
    """``blocks / (blocks_per_sm * sm_count)``: above 1 the kernel queues blocks on every SM."""
    return blocks.astype("float64") / (per_sm.astype("float64") * sm_count)


def occupancy_columns(kernels: pd.DataFrame, device: DeviceLimits) -> pd.DataFrame:
    """``blocks_per_sm``, ``sm_needed`` and ``waves`` for every kernel row."""
    per_sm = blocks_per_sm(kernels, device)
    blocks = blocks_per_grid(kernels)
    return pd.DataFrame(
        {
            "blocks_per_sm": per_sm,
            "sm_needed": sm_needed(blocks, per_sm, device.sm_count),
            "waves": waves(blocks, per_sm, device.sm_count),
        },
        index=kernels.index,
    )
