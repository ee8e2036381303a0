"""The profile file: round trip, plain-pandas readability, version checks and compatibility."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from orion_common.errors import OrionError
from postprocess.build import build_profile
from postprocess.demangle import demangle, demangler_available
from postprocess.ncu_csv import read_ncu_raw_csv
from postprocess.profile_format import (
    METADATA_KEYS,
    PROFILE_COLUMNS,
    PROFILE_VERSION,
    Profile,
    default_profile_path,
    profile_compatibility_warnings,
    read_profile,
    read_profile_header,
    write_profile,
)

RAW = Path(__file__).parent / "data" / "ncu" / "h200_resnet50_infer_bs4_x2_raw.csv"
H200_SOFTWARE = {
    "gpu_name": "NVIDIA H200",
    "sm_count": 132,
    "compute_capability": "9.0",
    "driver_version": "580.159.04",
    "cuda_version": "13.0",
    "torch_version": "2.11.0+cu130",
    "cudnn_version": "9.19.0",
    "hostname": "gpu-1",
}
LAMBDA_KERNEL = (
    "_ZN2at6native29vectorized_elementwise_kernelILi4EZZZNS0_12_GLOBAL__N_119launch_clamp_scalar"
    "ERNS_18TensorIteratorBaseEN3c106ScalarES6_NS0_6detail11ClampLimitsEENKUlvE_clEvENKUlvE5_clEv"
    "EUlfE_St5arrayIPcLm2EEEEviT0_T1_"
)


@pytest.fixture(scope="module")
def profile() -> Profile:
    metadata = {
        **{key: H200_SOFTWARE[key] for key in ("driver_version", "cuda_version")},
        **{key: H200_SOFTWARE[key] for key in ("torch_version", "cudnn_version")},
        "ncu_version": "2025.3.1.0",
        "workload": "resnet50",
        "mode": "infer",
        "batch_size": 4,
        "dtype": "fp32",
        "source": "ncu",
        "ncu_command": "ncu --csv --page raw --metrics ... python3 resnet50_infer.py",
    }
    built = build_profile(read_ncu_raw_csv(RAW), metadata)
    # Some measured durations, a kernel name with commas, quotes and '#' (libstdc++'s lambdas),
    # and a missing counter, so the round trip covers empty cells and awkward text.
    kernels = built.kernels.copy()
    kernels.loc[::2, "measured_duration_ns"] = kernels["duration_ns"].iloc[::2] * 0.8 + 1 / 3
    kernels.loc[3, "kernel_name"] = LAMBDA_KERNEL
    kernels.loc[3, "demangled_name"] = (
        demangle(LAMBDA_KERNEL) if demangler_available() else 'f<{lambda()#1}>("x", y)'
    )
    kernels.loc[4, "compute_throughput_pct"] = float("nan")
    kernels.loc[4, "kernel_class"] = "unknown"
    kernels.loc[5, "registers_per_thread"] = pd.NA
    return Profile(metadata=built.metadata, kernels=kernels)


def test_round_trip_is_lossless(profile: Profile, tmp_path: Path) -> None:
    path = write_profile(profile, tmp_path / "resnet50.profile.csv")
    again = read_profile(path)
    assert again.metadata == json.loads(json.dumps(profile.metadata))
    assert list(again.metadata) == list(METADATA_KEYS)
    pd.testing.assert_frame_equal(again.kernels, profile.kernels, check_exact=True)
    assert again.kernels["measured_duration_ns"].notna().sum() == 230


def test_file_layout_and_plain_pandas_read(profile: Profile, tmp_path: Path) -> None:
    path = write_profile(profile, tmp_path / "p.csv")
    lines = path.read_text().splitlines()
    assert lines[0] == "# orion-profile: 2"
    assert lines[1].startswith('# metadata: {"format": "orion-profile", "version": 2, ')
    assert lines[2].startswith('"order","kernel_name","demangled_name","grid_x"')
    plain = pd.read_csv(path, comment="#")
    assert list(plain.columns) == list(PROFILE_COLUMNS)
    assert len(plain) == 459
    # '#' inside a quoted kernel name is not taken for a comment.
    assert plain.loc[3, "demangled_name"] == profile.kernels.loc[3, "demangled_name"]
    assert plain.loc[0, "sm_needed"] == 132
    assert not list(tmp_path.glob(".p.csv.*"))  # no temporary file left behind


def _rewrite(path: Path, line: int, text: str) -> None:
    lines = path.read_text().split("\n")
    lines[line] = text
    path.write_text("\n".join(lines))


def test_newer_version_is_refused(profile: Profile, tmp_path: Path) -> None:
    path = write_profile(profile, tmp_path / "p.csv")
    _rewrite(path, 0, "# orion-profile: 3")
    with pytest.raises(OrionError) as error:
        read_profile(path)
    assert "version 3" in error.value.message
    assert "upgrade orion" in error.value.hint


def test_a_version_1_profile_reads_as_an_eager_step() -> None:
    # Version 1 had no graph columns: such a file (the committed reference profiles were made
    # before them) still reads, its kernels in no graph.
    path = Path(__file__).resolve().parents[1] / "profiles/nvidia-h200/resnet50-infer-bs4-fp32"
    old = read_profile(path / "profile.csv")
    assert old.metadata["version"] == 1
    assert len(old.kernels) > 100
    assert old.kernels["graph"].isna().all()
    assert old.kernels["graph_duration_ns"].isna().all()


def test_a_graph_profile_puts_every_kernel_node_in_its_graph(tmp_path: Path) -> None:
    from postprocess.build import graph_columns

    graph = graph_columns(3, {"cuda_graph": True, "step_gpu_span_ns": 1_400_000.0})
    assert graph["graph"].tolist() == [0, 0, 0]
    assert graph["graph_duration_ns"].tolist() == [1_400_000.0] * 3
    eager = graph_columns(2, {"cuda_graph": False})
    assert eager["graph"].isna().all() and eager["graph_duration_ns"].isna().all()


@pytest.mark.parametrize(
    ("line", "text", "message"),
    [
        (0, "# orion-profile: 0", "this orion reads versions 1, 2"),
        (0, "order,kernel_name", "not an orion profile"),
        (1, "# metadata: {not json", "not valid JSON"),
        (1, '# metadata: {"format": "orion-profile", "version": 1}', "expected 'orion-profile'"),
        (1, '# metadata: {"format": "orion-run", "version": 1}', "orion-run"),
        (1, "# something else", "line 2"),
    ],
)
def test_bad_headers_are_refused(
    profile: Profile, tmp_path: Path, line: int, text: str, message: str
) -> None:
    path = write_profile(profile, tmp_path / "p.csv")
    _rewrite(path, line, text)
    with pytest.raises(OrionError, match=message) as whole:
        read_profile(path)
    with pytest.raises(OrionError, match=message) as header:
        read_profile_header(path)
    assert (header.value.message, header.value.hint) == (whole.value.message, whole.value.hint)


def test_header_reader_returns_the_metadata_without_the_table(
    profile: Profile, tmp_path: Path
) -> None:
    path = write_profile(profile, tmp_path / "p.csv")
    assert read_profile_header(path) == read_profile(path).metadata
    assert read_profile_header(path)["version"] == PROFILE_VERSION
    # only the two header lines are read: a broken table does not matter here
    head = path.read_text().split("\n")[:2]
    path.write_text("\n".join(head) + "\nnot,a,kernel,table\n")
    assert read_profile_header(path)["format"] == "orion-profile"
    with pytest.raises(OrionError, match="lacks column"):
        read_profile(path)


@pytest.mark.parametrize("text", ["", "# orion-profile: 1\n", "order,kernel_name\n"])
def test_header_reader_refuses_a_file_without_a_header(tmp_path: Path, text: str) -> None:
    path = tmp_path / "p.csv"
    path.write_text(text)
    with pytest.raises(OrionError, match="not an orion profile"):
        read_profile_header(path)
    with pytest.raises(OrionError, match="profile not found"):
        read_profile_header(tmp_path / "none.csv")


def test_missing_column_is_refused(profile: Profile, tmp_path: Path) -> None:
    path = write_profile(profile, tmp_path / "p.csv")
    table = pd.read_csv(path, comment="#").drop(columns=["sm_needed"])
    head = path.read_text().split("\n")[:2]
    path.write_text("\n".join(head) + "\n" + table.to_csv(index=False))
    with pytest.raises(OrionError, match="sm_needed"):
        read_profile(path)


def test_missing_profile_file(tmp_path: Path) -> None:
    with pytest.raises(OrionError, match="profile not found"):
        read_profile(tmp_path / "none.csv")


def test_compatibility_warnings(profile: Profile) -> None:
    assert profile_compatibility_warnings(profile, H200_SOFTWARE) == []
    h100 = {
        **H200_SOFTWARE,
        "gpu_name": "NVIDIA H100 80GB HBM3",
        "torch_version": None,  # unknown here: skipped, not reported
        "cudnn_version": "9.20.0",
    }
    warnings = profile_compatibility_warnings(profile, h100)
    assert warnings == [
        "profile was made with GPU NVIDIA H200, this machine has NVIDIA H100 80GB HBM3: "
        "SM needs and durations do not carry over to another GPU.",
        "profile was made with cuDNN version 9.19.0, this machine has 9.20.0: "
        "convolutions may use other kernels.",
    ]
    fewer_sms = profile_compatibility_warnings(profile, {"sm_count": 114})
    assert len(fewer_sms) == 1 and "SM count 132" in fewer_sms[0]


def test_default_profile_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ORION_PROFILE_DIR", str(tmp_path))
    path = default_profile_path("resnet50", "infer", 4, "fp32", "NVIDIA H200")
    assert path == tmp_path / "nvidia-h200" / "resnet50-infer-bs4-fp32" / "profile.csv"
    odd = default_profile_path("bert", "train", 8, "bf16", "NVIDIA H100 80GB HBM3")
    assert odd.parent.parent.name == "nvidia-h100-80gb-hbm3"
    monkeypatch.delenv("ORION_PROFILE_DIR")
    home = default_profile_path("resnet50", "infer", 4, "fp32", "NVIDIA H200")
    assert (
        home
        == Path.home() / ".cache/orion/profiles/nvidia-h200/resnet50-infer-bs4-fp32/profile.csv"
    )
    with pytest.raises(OrionError, match="cannot be used in a file name"):
        default_profile_path("../etc", "infer", 4, "fp32", "NVIDIA H200")
