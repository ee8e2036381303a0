"""Run under a memory limit by test_scheduler_gpu.py: prints what torch sees, as JSON.

Reports torch.cuda.mem_get_info() (free, total), whether allocating `ask` bytes raised
torch.OutOfMemoryError, and whether a smaller allocation still works afterwards.
"""

from __future__ import annotations

import json
import sys

import torch


def main() -> None:
    ask = int(sys.argv[1])
    small = int(sys.argv[2])
    free, total = torch.cuda.mem_get_info()
    result = {"free": free, "total": total, "big_refused": False, "small_ok": False}
    try:
        big = torch.empty(ask, dtype=torch.uint8, device="cuda")
        del big
    except torch.OutOfMemoryError:
        result["big_refused"] = True
    torch.cuda.empty_cache()
    block = torch.ones(small, dtype=torch.uint8, device="cuda")
    # min, not sum: a uint8 sum accumulates in int64, an 8-byte-per-element copy of the block
    # that the limit rightly refuses.
    result["small_ok"] = bool(block.min().item() == 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
