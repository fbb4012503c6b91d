"""MFU's denominator, never guessed: a GPU's datasheet peak by its exact name only, the type a run
computes in, a user's ``peak_tflops`` checked, and a CPU's matmul peak measured once per machine
and kept (one process at a time, a damaged file measured again, an unwritable cache skipped)."""

from __future__ import annotations

import json
import math
import multiprocessing
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from dlscale.contract.errors import UserError
from dlscale.contract.gpu_peaks import (
    TABLE,
    check_peak_tflops,
    compute_dtype,
    datasheet_peak,
    no_peak_reason,
)
from dlscale.runtime import peak as peak_module
from dlscale.runtime.peak import Peak, cpu_peak, measure_cpu_peak, measured_cpu_peak, peak_of


def test_a_datasheet_peak_is_found_by_the_exact_name_only():
    assert datasheet_peak("NVIDIA H100 80GB HBM3", "bf16") == pytest.approx(989.4e12)
    assert datasheet_peak("  NVIDIA A100-SXM4-80GB\n", "tf32") == pytest.approx(156e12)
    assert datasheet_peak("NVIDIA H100 PCIe", "bf16") == pytest.approx(756.5e12)
    for near in ("NVIDIA H100", "nvidia h100 80gb hbm3", "NVIDIA H100 80GB HBM3 (MIG)", "H100"):
        assert datasheet_peak(near, "bf16") is None
    assert datasheet_peak("Tesla V100-SXM2-16GB", "bf16") is None  # no such figure: not fp16's
    assert datasheet_peak("Tesla V100-SXM2-16GB", "fp16") == pytest.approx(125e12)


def test_every_figure_is_a_dense_peak_of_a_known_type_with_its_source():
    for name, sheet in TABLE.items():
        assert name == name.strip() and sheet.source
        assert set(sheet.tflops) <= {"bf16", "fp16", "tf32", "fp32", "fp64"}
        assert all(0 < tflops < 5000 for tflops in sheet.tflops.values()), name


def test_an_unknown_gpu_has_no_peak_and_its_reason_names_the_key_that_sets_one():
    assert datasheet_peak("Foo X1", "bf16") is None
    reason = no_peak_reason("Foo X1", "bf16")
    assert "'Foo X1'" in reason and "peak_tflops" in reason and "\n" not in reason
    assert "no dense 'bf16' peak" in no_peak_reason("Tesla T4", "bf16")


@pytest.mark.parametrize(
    ("precision", "amp", "dtype"),
    [("float32", None, "fp32"), ("float64", None, "fp64"), ("float32", "none", "fp32"),
     ("float32", "bf16", "bf16"), ("float32", "fp16", "fp16")],
)  # fmt: skip
def test_the_type_a_run_computes_in(precision: str, amp: str | None, dtype: str):
    assert compute_dtype(precision, amp) == dtype


def test_a_type_that_is_none_of_them_is_refused():
    with pytest.raises(ValueError):
        compute_dtype("int8", None)
    with pytest.raises(ValueError):
        compute_dtype("float32", "fp8")


@pytest.mark.parametrize("value", [0, -1, -3.0, math.nan, math.inf, -math.inf, "abc", True, None])
def test_a_peak_tflops_that_is_not_a_peak_is_one_line_naming_key_value_and_fix(value: object):
    with pytest.raises(UserError) as raised:
        check_peak_tflops(value)
    said = str(raised.value)
    assert said.startswith("peak_tflops = ") and "peak_tflops=312" in said and "\n" not in said
    assert (repr(value) if isinstance(value, str) else str(value)) in said


def test_a_peak_tflops_is_taken_as_a_float():
    assert check_peak_tflops(12.5) == 12.5
    assert check_peak_tflops(312) == 312.0


def test_a_cpu_peak_is_measured_quickly_as_a_positive_finite_rate():
    rate = measure_cpu_peak(1, "fp32", seconds=0.05, n=128)
    assert math.isfinite(rate) and rate > 0
    assert measure_cpu_peak(1, "fp64", seconds=0.01, n=64) > 0
    with pytest.raises(ValueError):
        measure_cpu_peak(1, "bf16", seconds=0.01, n=64)


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, str]]:
    calls: list[tuple[int, str]] = []

    def fake(threads: int, dtype: str = "fp32", seconds: float = 0.5, n: int | None = None):
        calls.append((threads, dtype))
        return 1e11 * threads

    monkeypatch.setattr(peak_module, "measure_cpu_peak", fake)
    return calls


def test_a_cpu_peak_is_kept_and_read_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    calls = _counting(monkeypatch)
    first = cpu_peak(2, "fp32", tmp_path)
    assert first == Peak(2e11, "of measured fp32 matmul peak, 2 threads", "measured")
    assert cpu_peak(2, "fp32", tmp_path) == first
    assert calls == [(2, "fp32")]
    assert cpu_peak(1, "fp32", tmp_path).basis == "of measured fp32 matmul peak, 1 thread"
    assert cpu_peak(2, "fp64", tmp_path).flops_s == 2e11  # each count and type its own
    assert calls == [(2, "fp32"), (1, "fp32"), (2, "fp64")]
    kept = measured_cpu_peak(2, "fp32", tmp_path)
    assert kept.cached and kept.path is not None and kept.path.parent == tmp_path / "peak"
    assert not measured_cpu_peak(2, "fp32", tmp_path, fresh=True).cached
    assert len(calls) == 4


@pytest.mark.parametrize("damage", [b"", b"{not json", b"[]", b'{"flops_s": -1}', b"\xff\xfe"])
def test_a_damaged_cache_file_is_measured_again_and_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: bytes
):
    calls = _counting(monkeypatch)
    path = measured_cpu_peak(1, "fp32", tmp_path).path
    assert path is not None
    path.write_bytes(damage)
    assert cpu_peak(1, "fp32", tmp_path).flops_s == 1e11
    assert len(calls) == 2
    assert measured_cpu_peak(1, "fp32", tmp_path).cached  # replaced whole


def test_a_cache_that_cannot_be_written_still_gives_the_peak(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    calls = _counting(monkeypatch)
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")  # no folder can be made under it, even by root
    found = measured_cpu_peak(1, "fp32", blocked)
    assert found.flops_s == 1e11 and not found.cached and found.path is None
    monkeypatch.setenv("DLSCALE_CACHE_DIR", "")  # the cache turned off
    assert cpu_peak(1, "fp32").source == "measured"
    assert len(calls) == 2


def _measure_in_a_child(cache: Path, marker: Path, out: Path) -> None:
    """One rank starting: its measurement marks a line in ``marker`` and takes a while; the
    peak it got goes to ``out``."""

    def slow(threads: int, dtype: str = "fp32", seconds: float = 0.5, n: int | None = None):
        with open(marker, "a") as handle:
            handle.write("measured\n")
        time.sleep(0.5)
        return 3e10

    peak_module.measure_cpu_peak = slow  # type: ignore[assignment]  # in this child only
    peak_module.machine_cpu = lambda: None  # the load unknown: the other child starting up
    # (importing numpy beside the measurement) would make this one's busy and unkept
    Path(out).write_text(repr(cpu_peak(1, "fp32", cache).flops_s))


def test_processes_starting_together_measure_one_at_a_time_and_once(tmp_path: Path):
    marker = tmp_path / "marker"
    context = multiprocessing.get_context("spawn")
    children = [
        context.Process(target=_measure_in_a_child, args=(tmp_path, marker, tmp_path / f"{i}"))
        for i in range(2)
    ]
    for child in children:
        child.start()
    for child in children:
        child.join(timeout=60)
    assert [child.exitcode for child in children] == [0, 0]
    assert [(tmp_path / f"{i}").read_text() for i in range(2)] == ["30000000000.0"] * 2
    assert marker.read_text().splitlines() == ["measured"]


def test_a_peak_is_stored_and_read_back_and_junk_is_no_peak():
    peak = Peak(1.5e12, "of peak_tflops = 1.5 set by the user", "set")
    assert Peak.from_dict(peak.to_dict()) == peak
    for junk in (None, [], "x", {}, {"flops_s": 1.0, "basis": "b"},
                 {"flops_s": -1.0, "basis": "b", "source": "set"},
                 {"flops_s": math.nan, "basis": "b", "source": "set"},
                 {"flops_s": True, "basis": "b", "source": "set"},
                 {"flops_s": 1.0, "basis": 3, "source": "set"},
                 {"flops_s": 1.0, "basis": "b", "source": "guessed"}):  # fmt: skip
        assert Peak.from_dict(junk) is None


def test_the_peak_of_a_workers_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    calls = _counting(monkeypatch)
    monkeypatch.setenv("DLSCALE_CACHE_DIR", str(tmp_path))
    found, missing = peak_of("cuda", ["NVIDIA A100-SXM4-40GB"], 1, "bf16", 12.5)
    assert found == Peak(12.5e12, "of peak_tflops = 12.5 set by the user", "set") and not missing
    found, missing = peak_of("cuda", ["NVIDIA H100 80GB HBM3", "NVIDIA A10"], 1, "bf16", None)
    assert found is not None and missing is None and found.source == "datasheet"
    assert found.basis == "of datasheet bf16 dense peak (NVIDIA H100 80GB HBM3)"
    found, missing = peak_of("cuda", ["Foo X1"], 1, "bf16", None)
    assert found is None and missing is not None and "peak_tflops" in missing
    found, missing = peak_of("cpu", [], 4, "bf16", None)
    assert found is None and missing is not None and "fp32 and fp64 only" in missing
    found, missing = peak_of("cpu", [], 4, "fp32", None)
    assert found is not None and found.source == "measured" and missing is None
    assert found.basis == "of measured fp32 matmul peak, 4 threads"
    assert calls == [(4, "fp32")]
    with pytest.raises(UserError):
        peak_of("cpu", [], 1, "fp32", -3)


# --- a peak measured on a busy machine ------------------------------------------------------


def _machine_cpu(monkeypatch: pytest.MonkeyPatch, *readings: tuple[float, float] | None) -> None:
    """/proc/stat's ``(busy_s, steal_s)`` read as ``readings``, in turn; any window judged."""
    left = list(readings)
    monkeypatch.setattr(peak_module, "machine_cpu", lambda: left.pop(0))
    monkeypatch.setattr(peak_module, "MIN_JUDGED_S", 0.0)


def test_a_peak_measured_while_others_load_the_machine_is_kept_marked_and_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    calls = _counting(monkeypatch)
    _machine_cpu(monkeypatch, (100.0, 5.0), (100.0 + 1e4, 5.0))  # far past a tenth of it
    found = measured_cpu_peak(2, "fp32", tmp_path)
    assert found.busy and not found.cached and found.path is not None and found.flops_s == 2e11
    assert found.peak() == Peak(
        2e11, "of measured fp32 matmul peak, 2 threads, measured on a busy machine", "measured"
    )
    again = measured_cpu_peak(2, "fp32", tmp_path)  # young: used as it is, not measured
    assert again.cached and again.busy and len(calls) == 1
    monkeypatch.setattr(
        peak_module, "RETRY_BUSY_S", -1.0
    )  # old: measured again, busy again (stolen)
    _machine_cpu(monkeypatch, (0.0, 0.0), (0.0, 1e4))
    assert measured_cpu_peak(2, "fp32", tmp_path).busy and len(calls) == 2
    _machine_cpu(monkeypatch, (7.0, 1.0), (7.0, 1.0))  # quiet: measured again, kept for good
    quiet = measured_cpu_peak(2, "fp32", tmp_path)
    assert not quiet.busy and quiet.path is not None
    assert quiet.peak().basis == "of measured fp32 matmul peak, 2 threads"
    assert measured_cpu_peak(2, "fp32", tmp_path).cached
    assert len(calls) == 3


def test_the_own_cpu_time_is_not_outside_load_and_without_proc_the_peak_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    def busy_self(threads: int, dtype: str = "fp32", seconds: float = 0.5, n: int | None = None):
        end = time.process_time() + 0.05
        while time.process_time() < end:  # this process's own work: the machine busy with it
            pass
        return 1e11

    monkeypatch.setattr(peak_module, "measure_cpu_peak", busy_self)
    monkeypatch.setattr(peak_module.os, "cpu_count", lambda: 1)  # 0.05 s would be past a tenth
    _machine_cpu(monkeypatch, (10.0, 0.0), (10.0 + 0.05, 0.0))  # the machine: only this process
    assert not measured_cpu_peak(1, "fp32", tmp_path).busy
    _machine_cpu(monkeypatch, (10.0, 0.0), (10.0 + 0.15, 0.0))  # and 0.1 s of another's
    assert measured_cpu_peak(1, "fp32", tmp_path, fresh=True).busy
    _machine_cpu(monkeypatch, None, None)  # no /proc: the load is not known
    assert measured_cpu_peak(1, "fp64", tmp_path).path is not None


@pytest.mark.parametrize("flops", ["1e-300", "1e300", "1e7", "1e22"])
def test_a_cache_file_with_no_plausible_rate_is_measured_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flops: str
):
    calls = _counting(monkeypatch)
    path = measured_cpu_peak(1, "fp32", tmp_path).path
    assert path is not None
    record = json.loads(path.read_text())
    path.write_text(json.dumps(record).replace('"flops_s": 100000000000.0', f'"flops_s": {flops}'))
    assert json.loads(path.read_text())["flops_s"] == float(flops)
    found = measured_cpu_peak(1, "fp32", tmp_path)
    assert found.flops_s == 1e11 and not found.cached and len(calls) == 2


@pytest.mark.parametrize("flops", [1e-300, 1e300, 1e7, 1e22])
def test_a_stored_measured_peak_with_no_plausible_rate_is_no_peak(flops: float):
    for source in ("measured", "datasheet"):
        assert Peak.from_dict({"flops_s": flops, "basis": "b", "source": source}) is None
    assert Peak.from_dict({"flops_s": 1e8, "basis": "b", "source": "measured"}) is not None
    assert Peak.from_dict({"flops_s": 1e21, "basis": "b", "source": "datasheet"}) is not None


def test_a_set_peak_below_a_cpus_is_still_the_users():
    peak = Peak(1e3, "of peak_tflops = 1e-09 set by the user", "set")  # check_peak_tflops's
    assert Peak.from_dict(peak.to_dict()) == peak
    assert Peak.from_dict({**peak.to_dict(), "flops_s": 1e22}) is None


def test_microbench_peak_says_a_busy_machines_peak_is_marked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    from dlscale.cli import main as dlscale_main

    _counting(monkeypatch)
    monkeypatch.setenv("DLSCALE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "200")
    _machine_cpu(monkeypatch, (0.0, 0.0), (1e4, 0.0), (0.0, 0.0), (1e4, 0.0))
    assert dlscale_main(["microbench", "--peak", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "measured now, on a busy machine" in out and "on a busy machine: other processes" in out
    assert dlscale_main(["microbench", "--peak", "--threads", "1", "--json"]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert row["busy"] is True and row["cached"] is True  # kept, marked, and read back


# --- TensorFlow's GPUs by name ----------------------------------------------------------------


def test_tensorflows_gpus_are_recorded_by_their_names_too():
    from dlscale.contract.facts import gpu_names as facts_gpu_names
    from dlscale.frameworks.tensorflow.env import gpu_names

    devices = [SimpleNamespace(name=f"/physical_device:GPU:{i}") for i in range(4)]
    details = {
        devices[0].name: {"device_name": "NVIDIA H100 80GB HBM3", "compute_capability": (9, 0)},
        devices[1].name: {"compute_capability": (9, 0)},  # no name: left out
        devices[2].name: RuntimeError("not a GPU"),
        devices[3].name: {"device_name": "NVIDIA A100-SXM4-40GB"},
    }

    def get_device_details(device: SimpleNamespace) -> object:
        found = details[device.name]
        if isinstance(found, Exception):
            raise found
        return found

    tf = SimpleNamespace(
        config=SimpleNamespace(experimental=SimpleNamespace(get_device_details=get_device_details))
    )
    names = gpu_names(tf, devices)
    assert names == ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"]
    facts = {"gpus": [d.name for d in devices], "gpu_names": names}
    assert facts_gpu_names(facts) == ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB")
    found, missing = peak_of("cuda", list(facts_gpu_names(facts)), 1, "bf16", None)
    assert found is not None and found.source == "datasheet" and missing is None
    assert gpu_names(SimpleNamespace(), devices) == []  # a TensorFlow without the call
    assert facts_gpu_names({"gpus": ["/physical_device:GPU:0"], "gpu_names": []}) == (
        "/physical_device:GPU:0",
    )
