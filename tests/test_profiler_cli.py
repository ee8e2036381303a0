"""`orion profile` through typer's CliRunner: the summary, progress lines and clean errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import typer
from test_profiler_runs import (
    FIXTURE,
    FIXTURE_KERNELS,
    METRIC_SETS_DATA,
    install_fake_ncu,
    pretend_gpu,
    pretend_measure_pass,
)
from typer.testing import CliRunner

from orion_cli.profile import profile_command
from orion_cli.profile_views import short_kernel_name
from postprocess import read_profile

runner = CliRunner()


def _app() -> typer.Typer:
    app = typer.Typer(pretty_exceptions_enable=False)

    @app.callback()
    def main() -> None:
        """orion (test)."""

    app.command("profile")(profile_command)
    return app


def _invoke(*args: str):
    return runner.invoke(_app(), ["profile", *args])


def test_from_ncu_writes_the_profile_and_prints_a_summary(tmp_path: Path) -> None:
    raw = tmp_path / "ncu_raw.csv"
    shutil.copy(FIXTURE, raw)
    result = _invoke("resnet50", "--batch-size", "4", "--from-ncu", str(raw))
    assert result.exit_code == 0, result.output
    profile = read_profile(tmp_path / "profile.csv")
    assert len(profile.kernels) == FIXTURE_KERNELS
    assert profile.metadata["source"] == "ncu-csv"
    text = " ".join(result.output.split())
    assert "profile written:" in text
    assert f"{FIXTURE_KERNELS} kernels in the profiled step" in text
    assert "time by kernel class" in text and "top 10 kernels by ncu (replayed) time" in text
    assert "SMs each kernel needs (of 132)" in text and "all (132)" in text
    assert "warning: kernel names are ncu's demangled spelling" in text
    assert "metric set: full; throughputs from ncu's SOL metrics" in text


def test_from_ncu_with_a_fast_set_csv_says_how_throughputs_were_computed(tmp_path: Path) -> None:
    raw = tmp_path / "ncu_raw.csv"
    shutil.copy(METRIC_SETS_DATA / "h200_resnet50_infer_bs4_first80_breakdown.csv", raw)
    result = _invoke("resnet50", "-b", "4", "--from-ncu", str(raw))
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "metric set: fast; throughputs from the maximum of their main SOL sub-metrics" in text
    assert read_profile(tmp_path / "profile.csv").metadata["metric_set"] == "fast"


def test_metric_set_option_reaches_ncu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake_ncu(tmp_path, monkeypatch)
    pretend_gpu(monkeypatch)
    pretend_measure_pass(monkeypatch)
    result = _invoke("resnet50", "-b", "4", "-o", str(tmp_path / "out"), "--metric-set", "full")
    assert result.exit_code == 0, result.output
    metadata = read_profile(tmp_path / "out" / "profile.csv").metadata
    assert metadata["metric_set"] == "full"
    assert "sm__throughput.avg.pct_of_peak_sustained_elapsed" in metadata["ncu_command"]
    assert "metric set: full" in " ".join(result.output.split())


def test_metric_set_help_says_the_trade_off() -> None:
    result = _invoke("--help")
    text = " ".join(result.output.replace("│", " ").split())  # rich's box, wrapped lines
    assert "--metric-set" in text and "4 replay passes per kernel" in text
    assert "exact SOL throughputs: 10 passes" in text


def test_from_ncu_with_an_output_folder(tmp_path: Path) -> None:
    result = _invoke(
        "resnet50", "-b", "4", "--from-ncu", str(FIXTURE), "-o", str(tmp_path / "elsewhere")
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "elsewhere" / "profile.csv").is_file()


def test_live_run_with_plain_progress_and_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_fake_ncu(tmp_path, monkeypatch)
    pretend_gpu(monkeypatch)
    pretend_measure_pass(monkeypatch)
    result = _invoke("resnet50", "-b", "4", "-o", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("measuring (un-instrumented pass)")
    assert any(line.startswith("profiling with ncu: 459 kernels (first guess:") for line in lines)
    assert "  ncu: 459/459 kernels profiled" in lines
    assert sum("kernels profiled" in line for line in lines) <= 12  # every tenth, not every one
    text = " ".join(result.output.split())
    assert "top 10 kernels by measured time" in text
    assert "measured durations: 459 of 459 kernels matched" in text
    assert "post-processing: done in" in text
    assert "ncu report (Nsight Compute GUI)" in text
    assert "profile.ncu-rep" in "".join(result.output.split())  # folded, never cut
    assert "of which report -> CSV" in text
    assert (tmp_path / "out" / "profile.csv").is_file()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["resnet5"], "error: unknown workload 'resnet5'"),
        (["resnet50", "--batch-size", "0"], "error: batch size must be an integer >= 1, got 0"),
        (["resnet50", "--dtype", "fp16"], "error: unknown dtype 'fp16'"),
        (["resnet50", "--mode", "serve"], "error: unknown mode 'serve'"),
        (["resnet50", "--replay-mode", "range"], "error: unknown replay mode 'range'"),
        (["resnet50", "--measured", "m.csv"], "error: --measured only applies with --from-ncu"),
        (["resnet50", "--metric-set", "exact"], "error: unknown metric set 'exact'"),
        (
            ["resnet50", "--metric-set", "full", "--from-ncu", "x.csv"],
            "error: --metric-set applies to a live run",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = _invoke(*args)
    assert result.exit_code == 2  # a usage error: what was typed, not what the machine lacks
    assert message in result.output
    assert "Traceback" not in result.output
    error_lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1


def test_missing_ncu_is_an_error_with_a_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pretend_gpu(monkeypatch)
    monkeypatch.setenv("ORION_NCU", str(tmp_path / "no-ncu"))
    result = _invoke("resnet50", "-o", str(tmp_path / "out"))
    assert result.exit_code == 1
    assert "error: Nsight Compute (ncu) not found" in result.output
    assert "hint: install Nsight Compute" in result.output
    assert "Traceback" not in result.output


def test_no_gpu_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = _invoke("resnet50", "-o", str(tmp_path / "out"))
    assert result.exit_code == 1
    assert "error: orion profile needs an NVIDIA GPU" in result.output
    assert "Traceback" not in result.output


def test_ctrl_c_exits_130_without_a_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_fake_ncu(tmp_path, monkeypatch, mode="sleep")
    pretend_gpu(monkeypatch)
    pretend_measure_pass(monkeypatch)
    from profiler import pipeline

    original = pipeline.run_ncu

    def run_then_interrupt(*args, **kwargs):
        def on_kernel(done: int, total: int | None, name: str) -> None:
            if done == 2:
                raise KeyboardInterrupt

        kwargs["on_kernel"] = on_kernel
        return original(*args, **kwargs)

    monkeypatch.setattr(pipeline, "run_ncu", run_then_interrupt)
    result = _invoke("resnet50", "-o", str(tmp_path / "out"))
    assert result.exit_code == 130
    assert "interrupted" in result.output
    assert "==PROF== Profiling" in (tmp_path / "out" / "ncu.log").read_text()
    assert not (tmp_path / "out" / "ncu_raw.csv").exists()
    assert not (tmp_path / "out" / "profile.csv").exists()


@pytest.mark.parametrize(
    ("name", "short"),
    [
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
            "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)",
            "at::native::vectorized_elementwise_kernel<...>",
        ),
        (
            "void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>(int, "
            "float const*, long, long, long, int, int, int, int, int, int, int, int, int, int, "
            "float*, long*)",
            "at::native::max_pool_forward_nchw<...>",
        ),
        ("orion_copy_f32", "orion_copy_f32"),
        ("sm90_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tile128x128x32", None),
    ],
)
def test_short_kernel_names(name: str, short: str | None) -> None:
    result = short_kernel_name(name)
    assert len(result) <= 52
    if short is not None:
        assert result == short
