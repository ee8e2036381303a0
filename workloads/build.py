"""The one entry point that builds a workload: a spec checked against the registry, built by its
builder, captured as a CUDA graph when asked.

Kept out of the registry because building reaches the frameworks (``workloads.graph`` and
through it the torch models, which import the spec), while the spec imports the registry to
validate: in the registry this function closed an import circle
(registry -> graph -> torch_model -> spec -> registry). Here it sits above both and nothing in
the package imports it back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orion_common.errors import OrionError
from workloads.registry import get_workload_info

if TYPE_CHECKING:
    from workloads.base import Workload
    from workloads.spec import WorkloadSpec


def build_workload(spec: WorkloadSpec) -> Workload:
    """Validate ``spec`` and build its workload on its device, inputs included.

    Everything a step needs (model, optimizer, inputs, kernels, buffers) is made here, so that
    ``step()`` only enqueues GPU work and the first timed step costs what the others do. With
    ``spec.cuda_graph`` the step is also captured here, so a capture failure is a build error.
    """
    spec.validate()
    info = get_workload_info(spec.name)
    device_type = spec.device.split(":", 1)[0]
    if device_type not in info.devices:
        raise OrionError(
            f"workload {spec.name!r} cannot run on device {spec.device!r}; "
            f"it runs on: {', '.join(info.devices)}"
        )
    workload = info.builder(spec)
    if spec.cuda_graph:
        from workloads.graph import capture_inference

        return capture_inference(workload)
    return workload
