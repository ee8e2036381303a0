"""`orion profile --from-ncu`: labels checked against the run record, no silent overwrite of an
existing profile, and output paths that cannot be written as one-line errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_profiler_cli import _invoke
from test_profiler_runs import FIXTURE, FIXTURE_KERNELS

from orion_common.errors import OrionError
from postprocess import read_profile
from profiler import pipeline

RESNET_RECORD = {
    "format": "orion-profile-run",
    "version": 1,
    "workload": "resnet50",
    "mode": "infer",
    "batch_size": 4,
    "dtype": "fp32",
    "cuda_graph": False,
    "replay_mode": "kernel",
    "commands": {},
}


def _csv(tmp_path: Path, record: dict | None = None) -> Path:
    """A copy of the real ResNet-50 bs4 ncu CSV, with a run record beside it when given."""
    raw = tmp_path / "run" / "ncu_raw.csv"
    raw.parent.mkdir()
    shutil.copy(FIXTURE, raw)
    if record is not None:
        (raw.parent / "profile_run.json").write_text(json.dumps(record))
    return raw


def _error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error:")]


def _one_line_error(result, message: str) -> None:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert _error_lines(result.output) == [f"error: {message}"]


# --- labels ---------------------------------------------------------------------------------------


def test_labels_that_contradict_the_run_record_are_refused(tmp_path: Path) -> None:
    raw = _csv(tmp_path, RESNET_RECORD)
    result = _invoke("gpt2", "-m", "train", "-b", "64", "--dtype", "bf16", "--from-ncu", str(raw))
    _one_line_error(
        result,
        "ncu CSV was profiled as resnet50 infer bs4 fp32 (profile_run.json), "
        "not gpt2 train bs64 bf16",
    )
    assert "hint: give the labels the run record holds: orion profile resnet50" in result.output
    assert not (raw.parent / "profile.csv").exists()


@pytest.mark.parametrize(
    ("args", "given"),
    [
        (["resnet101", "-b", "4"], "resnet101 infer bs4 fp32"),
        (["resnet50", "-b", "8"], "resnet50 infer bs8 fp32"),
        (["resnet50", "-b", "4", "--dtype", "bf16"], "resnet50 infer bs4 bf16"),
        (["resnet50", "-b", "4", "-m", "train"], "resnet50 train bs4 fp32"),
    ],
)
def test_any_one_label_that_differs_is_named(tmp_path: Path, args: list[str], given: str) -> None:
    raw = _csv(tmp_path, RESNET_RECORD)
    result = _invoke(*args, "--from-ncu", str(raw))
    _one_line_error(
        result, f"ncu CSV was profiled as resnet50 infer bs4 fp32 (profile_run.json), not {given}"
    )


def test_a_cuda_graph_run_says_so_in_the_mismatch(tmp_path: Path) -> None:
    raw = _csv(tmp_path, {**RESNET_RECORD, "cuda_graph": True})
    result = _invoke("resnet50", "-b", "8", "--from-ncu", str(raw))
    _one_line_error(
        result,
        "ncu CSV was profiled as resnet50 infer bs4 fp32 cuda-graph (profile_run.json), "
        "not resnet50 infer bs8 fp32",
    )


def test_matching_labels_are_accepted_without_a_warning(tmp_path: Path) -> None:
    raw = _csv(tmp_path, RESNET_RECORD)
    result = _invoke("resnet50", "-b", "4", "--from-ncu", str(raw))
    assert result.exit_code == 0, result.output
    assert "labels not checked" not in result.output
    profile = read_profile(raw.parent / "profile.csv")
    assert len(profile.kernels) == FIXTURE_KERNELS
    assert profile.metadata["workload"] == "resnet50" and profile.metadata["batch_size"] == 4


def test_without_a_run_record_the_labels_are_taken_on_trust_with_a_warning(
    tmp_path: Path,
) -> None:
    raw = _csv(tmp_path)
    result = _invoke("gpt2", "-b", "64", "--from-ncu", str(raw))
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert f"warning: labels not checked: no profile_run.json beside {raw}" in text
    assert "written as gpt2 infer bs64 fp32 on your word" in text
    assert read_profile(raw.parent / "profile.csv").metadata["workload"] == "gpt2"


def test_a_run_record_without_labels_also_warns(tmp_path: Path) -> None:
    raw = _csv(tmp_path, {"ncu_version": "2025.3.1.0", "commands": {}})
    result = pipeline.profile_from_ncu(
        raw, workload="resnet50", mode="infer", batch_size=4, dtype="fp32"
    )
    assert any(
        warning.startswith("labels not checked: a profile_run.json without workload labels")
        for warning in result.warnings
    )


def test_the_library_call_checks_the_labels_too(tmp_path: Path) -> None:
    raw = _csv(tmp_path, RESNET_RECORD)
    with pytest.raises(OrionError, match=r"profiled as resnet50 infer bs4 fp32 .*not bert"):
        pipeline.profile_from_ncu(raw, workload="bert", mode="infer", batch_size=4, dtype="fp32")


# --- never replacing a profile by default ---------------------------------------------------------


def test_an_existing_profile_beside_the_csv_is_not_replaced(tmp_path: Path) -> None:
    raw = _csv(tmp_path, RESNET_RECORD)
    reference = raw.parent / "profile.csv"
    reference.write_text("the committed reference profile\n")
    result = _invoke("resnet50", "-b", "4", "--from-ncu", str(raw))
    _one_line_error(
        result, f"{reference} already exists; --from-ncu does not replace it by default"
    )
    assert "hint: pass -o DIR" in result.output
    assert reference.read_text() == "the committed reference profile\n"


def test_with_an_output_folder_the_existing_profile_stays_and_a_new_one_is_written(
    tmp_path: Path,
) -> None:
    raw = _csv(tmp_path, RESNET_RECORD)
    reference = raw.parent / "profile.csv"
    reference.write_text("the committed reference profile\n")
    result = _invoke("resnet50", "-b", "4", "--from-ncu", str(raw), "-o", str(tmp_path / "new"))
    assert result.exit_code == 0, result.output
    assert reference.read_text() == "the committed reference profile\n"
    assert len(read_profile(tmp_path / "new" / "profile.csv").kernels) == FIXTURE_KERNELS


# --- output paths that cannot be written ----------------------------------------------------------


def test_an_output_path_that_is_a_file(tmp_path: Path) -> None:
    raw = _csv(tmp_path, RESNET_RECORD)
    a_file = tmp_path / "passwd"
    a_file.write_text("root:x:0:0\n")
    result = _invoke("resnet50", "-b", "4", "--from-ncu", str(raw), "-o", str(a_file))
    _one_line_error(result, f"cannot write the profile to {a_file}: it is a file")
    assert a_file.read_text() == "root:x:0:0\n"


def test_an_output_path_below_a_file(tmp_path: Path) -> None:
    raw = _csv(tmp_path, RESNET_RECORD)
    a_file = tmp_path / "plain"
    a_file.write_text("x")
    below = a_file / "sub" / "dir"
    result = _invoke("resnet50", "-b", "4", "--from-ncu", str(raw), "-o", str(below))
    _one_line_error(result, f"cannot write the profile to {below}: {a_file} is a file")


def test_a_live_run_with_a_file_as_output_is_refused_before_any_work(tmp_path: Path) -> None:
    a_file = tmp_path / "passwd"
    a_file.write_text("x")
    result = _invoke("resnet50", "-b", "4", "-o", str(a_file))
    _one_line_error(result, f"cannot write the profile to {a_file}: it is a file")


@pytest.mark.parametrize("depth", ["sub", "sub/dir"])
def test_the_library_call_turns_path_errors_into_one_line(tmp_path: Path, depth: str) -> None:
    raw = _csv(tmp_path, RESNET_RECORD)
    a_file = tmp_path / "plain"
    a_file.write_text("x")
    below = a_file / depth
    with pytest.raises(OrionError) as info:
        pipeline.profile_from_ncu(
            raw, workload="resnet50", mode="infer", batch_size=4, dtype="fp32", out_dir=below
        )
    assert info.value.message == f"cannot write the profile to {below}: {a_file} is a file"


def test_a_profile_path_the_os_refuses_is_one_line(tmp_path: Path) -> None:
    raw = _csv(tmp_path, RESNET_RECORD)
    out = tmp_path / "out"
    (out / "profile.csv").mkdir(parents=True)  # a folder where the file should go
    result = _invoke("resnet50", "-b", "4", "--from-ncu", str(raw), "-o", str(out))
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    [line] = _error_lines(result.output)
    assert line.startswith(f"error: cannot write file {out / 'profile.csv'}: ")
