"""Peak FLOP/s of GPUs from their vendors' datasheets: MFU's denominator on a GPU, never guessed.

Each figure is the DENSE peak (no 2:4 structured sparsity) of ONE device, in TFLOP/s, per
type a model's products run in (:data:`DTYPES`). A datasheet that prints the sparse figure
(marked ``*``: "shown with sparsity") is halved, as its footnote says. ``tf32``, ``bf16`` and
``fp16`` are the matrix (Tensor Core, Matrix Core) figures; ``fp32`` and ``fp64`` are the
vector (CUDA core, shader) figures a float32 or float64 run computes at without TF32 or the
FP64 matrix units, the figure a datasheet names plainly ``FP32`` or ``FP64``. A type the
datasheet gives no figure for (bf16 on a V100, fp64 on an L4) has none here.

A device is found by its name exactly as ``torch.cuda.get_device_name()`` and ``nvidia-smi``
print it (surrounding spaces aside): never by a prefix, a case-folded or a close name, so an
H100 PCIe is never read as an H100 SXM, and an unknown device has no peak (the user sets one
with ``peak_tflops``) rather than another device's. docs/metrics.md, "MFU", says how it is
used.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dlscale.contract.errors import UserError
from dlscale.contract.text import excerpt

DTYPES = ("bf16", "fp16", "tf32", "fp32", "fp64")
"""The types a peak is given for."""


@dataclass(frozen=True)
class Datasheet:
    """One device's dense peaks in TFLOP/s by type, and the datasheet they come from."""

    source: str
    tflops: Mapping[str, float]


_A100 = {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5, "fp64": 9.7}
"""NVIDIA A100 Tensor Core GPU datasheet: the same peaks for its SXM and PCIe forms (FP64 Tensor
Core 19.5 aside); TF32 156 and BF16/FP16 312 dense (312 and 624 with sparsity)."""
_H100_SXM = {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9, "fp64": 33.5}
"""NVIDIA H100 Tensor Core GPU Architecture whitepaper, H100 SXM5 (the datasheet's 1,979 BF16
and 989 TF32 are with sparsity; its FP32 67 and FP64 34 are these, rounded)."""
_H100_NVL = {"bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0, "fp64": 30.0}
"""NVIDIA H100 NVL datasheet, per GPU: BF16/FP16 1,671 and TF32 835 with sparsity, halved."""
_V100_SXM2 = {"fp16": 125.0, "fp32": 15.7, "fp64": 7.8}
_V100_PCIE = {"fp16": 112.0, "fp32": 14.0, "fp64": 7.0}

TABLE: dict[str, Datasheet] = {
    "NVIDIA A100-SXM4-80GB": Datasheet("NVIDIA A100 datasheet (SXM)", _A100),
    "NVIDIA A100-SXM4-40GB": Datasheet("NVIDIA A100 datasheet (SXM)", _A100),
    "NVIDIA A100-PCIE-40GB": Datasheet("NVIDIA A100 datasheet (PCIe)", _A100),
    "NVIDIA A100 80GB PCIe": Datasheet("NVIDIA A100 datasheet (PCIe)", _A100),
    "NVIDIA H100 80GB HBM3": Datasheet("NVIDIA H100 architecture whitepaper (SXM5)", _H100_SXM),
    "NVIDIA H100 PCIe": Datasheet(
        "NVIDIA H100 datasheet (PCIe; BF16 1,513 and TF32 756 with sparsity, halved)",
        {"bf16": 756.5, "fp16": 756.5, "tf32": 378.0, "fp32": 51.2, "fp64": 25.6},
    ),
    "NVIDIA H100 NVL": Datasheet("NVIDIA H100 NVL datasheet (per GPU)", _H100_NVL),
    "NVIDIA H200": Datasheet("NVIDIA H200 datasheet (SXM: H100 SXM's GH100 peaks)", _H100_SXM),
    "NVIDIA H200 NVL": Datasheet("NVIDIA H200 NVL datasheet (per GPU, as H100 NVL)", _H100_NVL),
    "NVIDIA B200": Datasheet(
        "NVIDIA HGX B200 datasheet, per GPU (BF16/FP16 4.5 and TF32 2.2 PFLOP/s with sparsity, "
        "halved)",
        {"bf16": 2250.0, "fp16": 2250.0, "tf32": 1100.0, "fp32": 75.0, "fp64": 37.0},
    ),
    "NVIDIA L40S": Datasheet(
        "NVIDIA L40S datasheet (dense; 733 BF16 and 366 TF32 with sparsity)",
        {"bf16": 362.05, "fp16": 362.05, "tf32": 183.0, "fp32": 91.6},
    ),
    "NVIDIA L4": Datasheet(
        "NVIDIA L4 datasheet (BF16/FP16 242 and TF32 120 with sparsity, halved)",
        {"bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3},
    ),
    "NVIDIA A10": Datasheet(
        "NVIDIA A10 datasheet (dense; 250 BF16 and 125 TF32 with sparsity)",
        {"bf16": 125.0, "fp16": 125.0, "tf32": 62.5, "fp32": 31.2},
    ),
    "Tesla V100-SXM2-16GB": Datasheet("NVIDIA V100 datasheet (SXM2; fp16: Tensor)", _V100_SXM2),
    "Tesla V100-SXM2-32GB": Datasheet("NVIDIA V100 datasheet (SXM2; fp16: Tensor)", _V100_SXM2),
    "Tesla V100-PCIE-16GB": Datasheet("NVIDIA V100 datasheet (PCIe; fp16: Tensor)", _V100_PCIE),
    "Tesla V100-PCIE-32GB": Datasheet("NVIDIA V100 datasheet (PCIe; fp16: Tensor)", _V100_PCIE),
    "Tesla T4": Datasheet(
        "NVIDIA T4 datasheet (fp16: mixed-precision Tensor)", {"fp16": 65.0, "fp32": 8.1}
    ),
    "AMD Instinct MI300X": Datasheet(
        "AMD Instinct MI300X datasheet (dense matrix; fp32 and fp64: vector)",
        {"bf16": 1307.4, "fp16": 1307.4, "tf32": 653.7, "fp32": 163.4, "fp64": 81.7},
    ),
    "AMD Instinct MI250X": Datasheet(
        "AMD Instinct MI250X datasheet (matrix; fp32 and fp64: vector)",
        {"bf16": 383.0, "fp16": 383.0, "fp32": 47.9, "fp64": 47.9},
    ),
}
"""Dense peak TFLOP/s per device, by its exact name (see the module's docstring)."""


def datasheet(name: str) -> Datasheet | None:
    """The datasheet of the device called exactly ``name`` (surrounding spaces stripped)."""
    return TABLE.get(name.strip()) if isinstance(name, str) else None


def datasheet_peak(name: str, dtype: str) -> float | None:
    """The dense peak in FLOP/s (not TFLOP/s) of the device called exactly ``name`` for
    ``dtype``; ``None`` for a device not in :data:`TABLE` or a type its datasheet gives no
    figure for. Never a prefix's, a case-folded name's or another device's figure."""
    sheet = datasheet(name)
    if sheet is None:
        return None
    tflops = sheet.tflops.get(dtype)
    return None if tflops is None else tflops * 1e12


def no_peak_reason(name: str, dtype: str) -> str:
    """Why the GPU called ``name`` has no ``dtype`` peak, in one line for the user, with the
    key that sets one (markup is the caller's to escape)."""
    where = 'docs/metrics.md, "MFU"'
    fix = "set its dense peak per device with --set peak_tflops=..."
    if datasheet(name) is None:
        return (
            f"no MFU: GPU {excerpt(name, 80)} is not in dlscale's datasheet table ({where}); " + fix
        )
    return (
        f"no MFU: the datasheet of GPU {excerpt(name, 80)} gives no dense {excerpt(dtype)} "
        f"peak ({where}); {fix}"
    )


_FROM_PRECISION = {"float32": "fp32", "float64": "fp64", "float16": "fp16", "bfloat16": "bf16"}
_FROM_AMP = {"bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16", "float16": "fp16"}


def compute_dtype(precision: str, amp: str | None) -> str:
    """The type a run's matrix products compute in, the :data:`DTYPES` name its peak is read
    for: ``amp`` (``bf16``, ``fp16``) where set, else ``precision`` (``float32`` -> ``fp32``,
    ``float64`` -> ``fp64``; ``amp`` ``none`` or ``None``: the precision's).

    An engine whose float32 products may run on TF32 tensor cores says so itself
    (``Engine.compute_dtype``: torch on CUDA, where cuDNN's convolutions use TF32 by default),
    so that its MFU is read against the higher TF32 peak, never the fp32 one it would
    overstate against. ``ValueError`` for a precision or an ``amp`` that is none of these (a
    config's values are checked before they come here)."""
    if amp is not None and amp != "none":
        if amp not in _FROM_AMP:
            raise ValueError(f"amp {amp!r} is none of none, {', '.join(_FROM_AMP)}")
        return _FROM_AMP[amp]
    if precision not in _FROM_PRECISION:
        raise ValueError(f"precision {precision!r} is none of {', '.join(_FROM_PRECISION)}")
    return _FROM_PRECISION[precision]


MAX_PEAK_TFLOPS = 1e9
"""A bound no device's peak comes near (a zettaFLOP/s): a larger ``peak_tflops`` is a typo."""


def check_peak_tflops(value: object) -> float:
    """A user's ``peak_tflops`` as a float: a finite number above 0 (and below
    :data:`MAX_PEAK_TFLOPS`) in TFLOP/s; zero, a negative number, NaN, an infinity, a bool or
    text is a :class:`~dlscale.contract.errors.UserError` of one line naming the key, the
    value and the fix."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 < value < MAX_PEAK_TFLOPS  # NaN compares false, an infinity is past it
    ):
        raise UserError(
            f"peak_tflops = {excerpt(value)} is not a peak: give one worker's device's dense "
            "peak in TFLOP/s, a positive number such as peak_tflops=312 (an A100's bf16)"
        )
    return float(value)
