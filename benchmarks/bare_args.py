"""The command line every bare reference script takes (run_all.bare passes these)."""

from __future__ import annotations

import argparse


def bare_parser(threads: int = 2) -> argparse.ArgumentParser:
    """--model, --batch, --threads, --warmup and --steps; a script adds its own after."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="resnet44")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=threads)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=24)
    return parser
