"""How long `dlscale report` takes for a store of 500 runs, and how big the page is.

The 500 runs are the real runs of tests/data/results repeated with other worker counts, seeds
and backends (so they are distinct points with full metrics and event-derived histories).
Usage: python benchmarks/report_speed.py [--runs 500]
"""

from __future__ import annotations

import argparse
import copy
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dlscale.config import RunConfig
from dlscale.contract.run_config import core_keys
from dlscale.store import RunStore

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "data" / "results"


def build_store(root: Path, runs: int) -> None:
    templates = [r for r in RunStore(FIXTURE).results() if r["status"] == "completed"]
    store = RunStore(root)
    for index in range(runs):
        row = copy.deepcopy(templates[index % len(templates)])
        workers = 2 ** (index % 6)
        config = RunConfig.make(
            **dict(
                {k: v for k, v in row["config"].items() if k in core_keys()},
                workers=workers,
                backend="torch-single" if workers == 1 else "torch-ddp",
                model=("tiny", "resnet20", "resnet44")[index // 6 % 3],
                seed=index // 18,
                repeat_id=0,
            )
        )
        row["config"] = config.to_dict()
        row["study"] = f"study-{index // 6 % 10}"
        row["run_id"] = config.run_id()
        store.write_result(row["run_id"], row)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=500)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dlscale-report-bench-"))
    build_store(work / "results", args.runs)
    stored = len(list((work / "results").glob("*/result.json")))
    out = work / "report.html"
    start = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "dlscale",
            "report",
            "--results",
            str(work / "results"),
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    elapsed = time.perf_counter() - start
    print(
        f"report of {stored} runs: {elapsed:.2f} s (command start to exit), "
        f"{out.stat().st_size / 1e6:.2f} MB of HTML"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
