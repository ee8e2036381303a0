"""The workload registry and spec validation: what the CLI relies on before any framework loads."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from orion_common.errors import OrionError
from workloads import (
    WorkloadInfo,
    WorkloadSpec,
    build_workload,
    get_workload_info,
    list_workloads,
)

REPO = Path(__file__).resolve().parents[1]
EXPECTED = [
    "resnet50",
    "resnet101",
    "mobilenet_v2",
    "bert",
    "gpt2",
    "synthetic-compute",
    "synthetic-memory",
]


def _error(spec: WorkloadSpec) -> OrionError:
    with pytest.raises(OrionError) as caught:
        spec.validate()
    message = str(caught.value)
    assert "\n" not in message and "Traceback" not in message
    return caught.value


def test_lists_every_workload_in_a_stable_order() -> None:
    infos = list_workloads()
    assert [info.name for info in infos] == EXPECTED
    assert [info.name for info in list_workloads()] == EXPECTED
    for info in infos:
        assert isinstance(info, WorkloadInfo)
        assert info.kind in {"vision", "nlp", "synthetic"}
        assert info.description and "\n" not in info.description
        assert get_workload_info(info.name) is info


def test_infos_declare_requirements_and_options() -> None:
    assert get_workload_info("resnet50").requires == ("torchvision",)
    assert get_workload_info("bert").requires == ("transformers",)
    assert get_workload_info("synthetic-compute").requires == ("cupy",)
    assert get_workload_info("synthetic-memory").devices == ("cuda",)

    def defaults(name: str) -> dict[str, int]:
        return {opt.name: opt.default for opt in get_workload_info(name).options}

    assert defaults("resnet50") == {}
    assert defaults("bert") == {"seq_len": 128}
    assert defaults("gpt2") == {"seq_len": 128}
    assert defaults("synthetic-compute") == {"grid": 0, "block": 256, "iterations": 4096}
    assert defaults("synthetic-memory") == {"grid": 0, "block": 256, "mib": 256}
    for info in list_workloads():
        for opt in info.options:
            assert opt.meaning and "\n" not in opt.meaning


def test_valid_spec_passes_and_resolves_defaults() -> None:
    spec = WorkloadSpec("gpt2", mode="train", batch_size=2, dtype="bf16", options={"seq_len": 16})
    spec.validate()
    assert spec.resolved_options() == {"seq_len": 16}
    assert WorkloadSpec("synthetic-compute").resolved_options()["iterations"] == 4096


def test_spec_keeps_its_own_copy_of_the_options() -> None:
    options = {"seq_len": 16}
    spec = WorkloadSpec("bert", options=options)
    options["seq_len"] = 9999
    assert spec.options == {"seq_len": 16}


def test_unknown_name_lists_the_known_ones() -> None:
    error = _error(WorkloadSpec("resnet5"))
    assert "unknown workload 'resnet5'" in str(error)
    for name in EXPECTED:
        assert name in str(error)
    assert error.hint is not None and "resnet50" in error.hint
    with pytest.raises(OrionError, match="known workloads: resnet50"):
        get_workload_info("nope")


@pytest.mark.parametrize("batch_size", [0, -3, True, 2.0])
def test_batch_size_must_be_a_positive_integer(batch_size: object) -> None:
    error = _error(WorkloadSpec("resnet50", batch_size=batch_size))  # type: ignore[arg-type]
    assert "batch size must be an integer >= 1" in str(error)


def test_unknown_dtype_and_mode_list_the_allowed_ones() -> None:
    assert "allowed dtypes: fp32, bf16" in str(_error(WorkloadSpec("bert", dtype="fp16")))
    assert "allowed modes: infer, train" in str(_error(WorkloadSpec("bert", mode="eval")))


def test_unknown_option_lists_the_allowed_ones() -> None:
    error = _error(WorkloadSpec("synthetic-memory", options={"iterations": 4}))
    assert "unknown option 'iterations'" in str(error)
    assert "allowed options: grid, block, mib" in str(error)
    error = _error(WorkloadSpec("resnet50", options={"seq_len": 4}))
    assert "takes no options" in str(error)


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("bert", {"seq_len": 0}),
        ("bert", {"seq_len": 513}),
        ("gpt2", {"seq_len": "16"}),
        ("synthetic-compute", {"block": 2048}),
        ("synthetic-compute", {"grid": -1}),
        ("synthetic-memory", {"mib": 0}),
    ],
)
def test_option_values_are_range_checked(name: str, options: dict[str, object]) -> None:
    error = _error(WorkloadSpec(name, options=options))  # type: ignore[arg-type]
    assert "must be an integer" in str(error)


@pytest.mark.parametrize("device", ["tpu", "cuda:x", "", "cuda:0\n"])
def test_bad_device_strings_are_rejected(device: str) -> None:
    assert "invalid device" in str(_error(WorkloadSpec("bert", device=device)))


def test_registry_imports_no_framework() -> None:
    code = textwrap.dedent(
        """
        import sys
        import workloads
        from workloads import WorkloadSpec, list_workloads
        assert len(list_workloads()) == 7
        WorkloadSpec("bert", options={"seq_len": 16}).validate()
        WorkloadSpec("synthetic-memory", device="cuda:1").validate()
        heavy = {"torch", "torchvision", "transformers", "cupy", "numpy"} & set(sys.modules)
        assert not heavy, heavy
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("name", ["synthetic-compute", "synthetic-memory"])
def test_synthetic_workloads_refuse_the_cpu(name: str) -> None:
    with pytest.raises(OrionError) as caught:
        build_workload(WorkloadSpec(name, device="cpu"))
    assert str(caught.value) == f"workload {name!r} cannot run on device 'cpu'; it runs on: cuda"


def test_cuda_without_a_gpu_is_a_one_line_error() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    with pytest.raises(OrionError) as caught:
        build_workload(WorkloadSpec("bert", device="cuda", options={"seq_len": 8}))
    assert "torch sees no CUDA GPU" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_missing_module_names_the_package_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    monkeypatch.setitem(sys.modules, "torchvision", None)  # makes `import torchvision` fail
    with pytest.raises(OrionError) as caught:
        build_workload(WorkloadSpec("resnet50", device="cpu"))
    assert "needs the Python module 'torchvision'" in str(caught.value)
    assert caught.value.hint == "pip install torchvision"


def test_any_missing_module_is_a_one_line_error() -> None:
    from workloads._runtime import require

    with pytest.raises(OrionError) as caught:
        require("orion_no_such_module", "demo")
    assert "'orion_no_such_module'" in str(caught.value)
    assert caught.value.hint == "pip install orion_no_such_module"
