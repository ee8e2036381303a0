"""Model workloads on the CPU: the step API, BERT and GPT-2 in both modes and dtypes, vision models.

Small shapes (batch 1, 16 tokens) keep each case to a few seconds; the GPU file runs full sizes.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import pytest

from orion_common.errors import OrionError
from workloads import Workload, WorkloadSpec, build_workload

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

SEQ_LEN = 16


class _CountingWorkload(Workload):
    """A workload whose step only records that it ran, to test the shared step API."""

    def __init__(self, spec: WorkloadSpec, log: list[str]) -> None:
        super().__init__(spec, torch.device("cpu"))
        self.log = log

    def _step(self, stream: Any) -> None:
        self.log.append("step")


def test_run_profiled_step_brackets_exactly_one_step() -> None:
    log: list[str] = []
    wl = _CountingWorkload(WorkloadSpec("bert", batch_size=5, device="cpu"), log)
    wl.run_profiled_step(lambda: log.append("before"), lambda: log.append("after"))
    assert log == ["before", "step", "after"]
    assert wl.samples_per_step == 5


def test_warmup_runs_the_given_number_of_steps() -> None:
    log: list[str] = []
    wl = _CountingWorkload(WorkloadSpec("bert", device="cpu"), log)
    wl.warmup(4)
    wl.warmup(0)
    assert log == ["step"] * 4
    with pytest.raises(OrionError, match="warm-up steps must be an integer >= 0"):
        wl.warmup(-1)


def _no_network(*args: object, **kwargs: object) -> None:
    raise AssertionError("a workload build tried to open a network socket")


def _build(name: str, mode: str, dtype: str, monkeypatch: pytest.MonkeyPatch) -> Workload:
    monkeypatch.setattr(socket, "socket", _no_network)
    spec = WorkloadSpec(
        name, mode=mode, batch_size=1, dtype=dtype, device="cpu", options={"seq_len": SEQ_LEN}
    )
    wl = build_workload(spec)
    assert wl.spec == spec
    assert wl.samples_per_step == 1
    return wl


def _snapshot(wl: Workload) -> list[torch.Tensor]:
    return [p.detach().clone() for p in wl.model.parameters()]  # type: ignore[attr-defined]


def _changed(before: list[torch.Tensor], wl: Workload) -> int:
    after = list(wl.model.parameters())  # type: ignore[attr-defined]
    return sum(not torch.equal(b, a) for b, a in zip(before, after, strict=True))


LOGIT_SHAPES: dict[str, Callable[[Any], tuple[int, ...]]] = {
    "bert": lambda config: (1, 2),
    "gpt2": lambda config: (1, SEQ_LEN, config.vocab_size),
}


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_nlp_inference_steps(name: str, dtype: str, monkeypatch: pytest.MonkeyPatch) -> None:
    wl = _build(name, "infer", dtype, monkeypatch)
    before = _snapshot(wl)
    outputs = [wl.step() for _ in range(3)]
    wl.synchronize()
    expected = LOGIT_SHAPES[name](wl.model.config)  # type: ignore[attr-defined]
    for logits in outputs:
        assert tuple(logits.shape) == expected
        assert torch.isfinite(logits.float()).all()
    assert outputs[0].dtype == (torch.bfloat16 if dtype == "bf16" else torch.float32)
    assert torch.equal(outputs[0], outputs[2])  # eval mode: same input, same answer
    assert _changed(before, wl) == 0
    if dtype == "fp32":
        _assert_stock_attention_agrees(wl)


def _assert_stock_attention_agrees(wl: Workload) -> None:
    """orion's mask-free SDPA gives what transformers' own SDPA gives with a mask of ones.

    For GPT-2 this also shows the attention stayed causal: the last token does not change the
    logits of the earlier positions.
    """
    model = wl.model  # type: ignore[attr-defined]
    ours_name = model.config._attn_implementation
    assert ours_name == "orion_sdpa"
    ids = torch.randint(0, model.config.vocab_size, (1, SEQ_LEN))
    with torch.inference_mode():
        ours = model(input_ids=ids).logits
        if wl.spec.name == "gpt2":
            changed = ids.clone()
            changed[0, -1] = (ids[0, -1] + 1) % model.config.vocab_size
            assert torch.equal(model(input_ids=changed).logits[:, :-1], ours[:, :-1])
        model.set_attn_implementation("sdpa")
        try:
            stock = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
        finally:
            model.set_attn_implementation(ours_name)
    torch.testing.assert_close(ours, stock, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_nlp_training_steps(name: str, dtype: str, monkeypatch: pytest.MonkeyPatch) -> None:
    wl = _build(name, "train", dtype, monkeypatch)
    before = _snapshot(wl)
    losses = [wl.step() for _ in range(3)]
    wl.synchronize()
    for loss in losses:
        assert loss.dim() == 0 and torch.isfinite(loss)
        assert not loss.requires_grad
    # weights stay fp32 under bf16 autocast, and the optimizer moved (nearly) all of them
    assert all(p.dtype == torch.float32 for p in wl.model.parameters())  # type: ignore[attr-defined]
    assert _changed(before, wl) >= len(before) // 2


VISION = ["resnet50", "resnet101", "mobilenet_v2"]


@pytest.mark.torchvision
@pytest.mark.parametrize("mode", ["infer", "train"])
@pytest.mark.parametrize("name", VISION)
def test_vision_steps_on_cpu(name: str, mode: str) -> None:
    wl = build_workload(WorkloadSpec(name, mode=mode, batch_size=2, device="cpu"))
    before = _snapshot(wl)
    outputs = [wl.step() for _ in range(2)]
    wl.synchronize()
    for out in outputs:
        assert torch.isfinite(out).all()
    if mode == "infer":
        assert tuple(outputs[0].shape) == (2, 1000)
        assert _changed(before, wl) == 0
    else:
        assert outputs[0].dim() == 0
        assert _changed(before, wl) > 0
