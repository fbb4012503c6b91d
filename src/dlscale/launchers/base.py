"""The launcher contract: a plan as data, then a watched run of it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path

from dlscale.config.run_config import RunConfig


@dataclass(frozen=True, kw_only=True)
class ProcessPlan:
    rank: int
    argv: tuple[str, ...]
    env: dict[str, str]
    """Variables set for this process on top of the parent's environment."""
    stdout: Path
    stderr: Path


@dataclass(frozen=True, kw_only=True)
class LaunchPlan:
    processes: tuple[ProcessPlan, ...]
    threads_per_worker: int
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class LaunchOutcome:
    ok: bool
    returncodes: dict[int, int | None]
    failed_rank: int | None = None
    reason: str | None = None
    stderr_tail: list[str] = field(default_factory=list)
    duration_s: float = 0.0


class Launcher(ABC):
    @abstractmethod
    def plan(self, config: RunConfig, spec_path: Path, python: str) -> LaunchPlan:
        """Commands and environments for every rank; pure (no process is started)."""

    @abstractmethod
    def run(self, plan: LaunchPlan, timeout_s: float) -> LaunchOutcome:
        """Start the plan, stop every rank when one fails or the timeout passes."""
