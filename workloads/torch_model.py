"""A torch ``nn.Module`` with fixed synthetic inputs, stepped as inference or as training.

Vision and NLP workloads differ only in how they call their model and compute a loss; the step
itself (modes, autocast, optimizer) is the same and lives here once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from workloads import _runtime
from workloads.base import Workload
from workloads.spec import WorkloadSpec

# The same optimizer for every model: cheap in memory and simple, since what matters to orion is
# the kernel mix of a training iteration, not convergence.
LEARNING_RATE = 0.01
MOMENTUM = 0.9


class TorchModelWorkload(Workload):
    """Inference: ``infer(model, *inputs)`` under ``torch.inference_mode()`` in eval mode.

    Training: ``zero_grad(set_to_none=True)``, ``loss(model, *inputs)``, backward and an SGD
    step, in train mode. In bf16, autocast covers the forward pass and the loss; weights,
    gradients and optimizer state stay fp32.

    ``inputs`` are the request's tensors, made once at build; they are kept as attributes (not
    only inside closures) so that a CUDA-graph replay can use them as its static input buffers.
    """

    def __init__(
        self,
        spec: WorkloadSpec,
        device: torch.device,
        model: torch.nn.Module,
        inputs: Sequence[torch.Tensor],
        infer: Callable[..., torch.Tensor],
        loss: Callable[..., torch.Tensor],
    ) -> None:
        super().__init__(spec, device)
        self.model = model
        self.inputs: tuple[torch.Tensor, ...] = tuple(inputs)
        self._infer = infer
        self._loss = loss
        self._optimizer: torch.optim.Optimizer | None = None
        if spec.mode == "train":
            model.train()
            self._optimizer = torch.optim.SGD(
                model.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM
            )
        else:
            model.eval()
            model.requires_grad_(False)

    def forward(self) -> torch.Tensor:
        """One inference forward pass on ``inputs`` (what a CUDA graph captures)."""
        with torch.inference_mode(), _runtime.autocast(self.spec, self.device):
            return self._infer(self.model, *self.inputs)

    def _step(self, stream: torch.cuda.Stream | None) -> torch.Tensor:
        if self._optimizer is None:
            return self.forward()
        self._optimizer.zero_grad(set_to_none=True)
        with _runtime.autocast(self.spec, self.device):
            loss = self._loss(self.model, *self.inputs)
        loss.backward()
        self._optimizer.step()
        return loss.detach()
