"""BERT-base and GPT-2 small built from transformers configs: random weights, random token ids.

Nothing is downloaded: models come from a default config (never ``from_pretrained``) and inputs
are random ids, so no tokenizer is needed. ``HF_HUB_OFFLINE=1`` is set (unless the user set it)
before transformers is first imported, so that nothing it does on import reaches the network.

Attention runs PyTorch SDPA, pinned rather than left to the transformers default (which varies
with the version and with optional packages such as flash-attn); SDPA picks its backend from
shapes, dtype and GPU alone, which are the same in the profiling run and the co-location run.

It is registered under its own name, ``orion_sdpa``, with no mask function. For the stock
``sdpa`` name, transformers builds a mask in every forward and inspects tensors on the host to
decide whether it can skip it (``mask.all()`` for a 2D mask; for GPT-2, a packed-sequence check
on the position ids even with no mask): device-to-host synchronizations inside the step, after
which it skips the mask anyway for unpadded inputs. With no mask function registered it skips
mask creation outright, and SDPA runs the same kernels (causal for GPT-2) without the
synchronizations. For the same reason BERT gets no attention mask: with every token real, a
mask of ones means the same as none.
"""

from __future__ import annotations

import os
from types import ModuleType

import torch

from orion_common.errors import OrionError
from workloads import _runtime
from workloads.spec import WorkloadSpec
from workloads.torch_model import TorchModelWorkload

BERT_NUM_LABELS = 2
_ATTENTION = "orion_sdpa"


def _transformers(spec: WorkloadSpec) -> ModuleType:
    """transformers, offline, with SDPA registered under orion's mask-free name."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    transformers = _runtime.require("transformers", spec.name)
    interface = getattr(transformers, "AttentionInterface", None)
    if interface is None:
        raise OrionError(
            f"workload {spec.name!r} needs transformers >= 4.48 (for its attention interface), "
            f"found {transformers.__version__}",
            hint="pip install -U transformers",
        )
    interface.register(_ATTENTION, interface()["sdpa"])
    return transformers


def _prepare(spec: WorkloadSpec) -> tuple[torch.device, ModuleType, int]:
    """The device, transformers (offline, SDPA registered) and the ``seq_len`` option: what both
    models resolve, alike, before they build."""
    return _runtime.resolve_device(spec), _transformers(spec), spec.resolved_options()["seq_len"]


def build_bert(spec: WorkloadSpec) -> TorchModelWorkload:
    device, transformers, seq_len = _prepare(spec)
    config = transformers.BertConfig(num_labels=BERT_NUM_LABELS, attn_implementation=_ATTENTION)
    with _runtime.seeded(device), torch.device(device):
        model = transformers.BertForSequenceClassification(config)
        input_ids = torch.randint(0, config.vocab_size, (spec.batch_size, seq_len))
        labels = torch.randint(0, BERT_NUM_LABELS, (spec.batch_size,))
    return _token_model(spec, device, model, input_ids, labels)


def build_gpt2(spec: WorkloadSpec) -> TorchModelWorkload:
    device, transformers, seq_len = _prepare(spec)
    # No KV cache: each request is one full forward pass, and the cache objects only cost time.
    config = transformers.GPT2Config(attn_implementation=_ATTENTION, use_cache=False)
    with _runtime.seeded(device), torch.device(device):
        model = transformers.GPT2LMHeadModel(config)
        # The class name matches no transformers loss name; naming the causal-LM loss it falls
        # back to anyway keeps transformers from logging a warning at the first training step.
        model.loss_type = "ForCausalLM"
        input_ids = torch.randint(0, config.vocab_size, (spec.batch_size, seq_len))
    # A causal LM learns to predict its own input: the ids are their own labels.
    return _token_model(spec, device, model, input_ids, labels=None)


def _token_model(
    spec: WorkloadSpec,
    device: torch.device,
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    labels: torch.Tensor | None,
) -> TorchModelWorkload:
    """Both models take token ids alone and answer logits; only their training labels differ.

    ``labels`` None means the step's ids themselves (the tensor the step is given, which may
    be a copy of ``input_ids``), not a tensor fixed at build.
    """
    _runtime.finish_build(device)
    return TorchModelWorkload(
        spec,
        device,
        model,
        inputs=(input_ids,),
        infer=lambda m, ids: m(input_ids=ids).logits,
        loss=lambda m, ids: m(input_ids=ids, labels=ids if labels is None else labels).loss,
    )
