"""The steps a TensorFlow script's own loop applies, counted where its optimizer applies them.

A custom loop (``GradientTape`` and ``optimizer.apply_gradients``, with or without Horovod's
``DistributedGradientTape``) runs its step inside a ``tf.function``: Python sees
``apply_gradients`` once, when the function is traced, never at the calls after. What every
call does leave is the optimizer's ``iterations`` variable, which ``apply_gradients``
increments in the graph. So the optimizers are found where Python does see them (every Keras
optimizer's ``apply_gradients``, traced or eager, notes its optimizer and the value its
``iterations`` had before), and their ``iterations`` are read after each outermost call of a
``tf.function`` (and after an eager ``apply_gradients`` outside one): each increment is a
step ended (:meth:`StepRecorder.stepped`). Where several optimizers step in one call (a GAN's
two), the call's steps are the most any of them took.

A ``tf.function`` call that runs several steps (a loop inside the graph) ends all of them at
its return, at one time. Reading ``iterations`` after a call waits for the call's work: on a
GPU that is one host-device sync a step (as Keras ``fit``'s batch callbacks make). The steps
``model.fit`` runs are counted by its batch callback instead (:mod:`.script`), so a call made
inside ``fit`` is not counted here.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from dlscale.runtime.script_steps import StepRecorder


class AppliedSteps:
    """Counts the steps of the script's optimizers into ``recorder``."""

    def __init__(self, tf: Any, recorder: StepRecorder):
        self._tf = tf
        self._recorder = recorder
        self._last: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        """Each optimizer seen applying gradients: its ``iterations`` when last read."""
        self._calls = threading.local()  # tf.function calls in progress in this thread
        self.in_fit = 0
        """``model.fit`` calls in progress (their steps are the fit callback's)."""

    def seen(self, optimizer: Any) -> None:
        """``optimizer`` is about to apply gradients (traced or eager): from now on its
        steps count, from the value its ``iterations`` has now."""
        if optimizer in self._last:
            return
        with self._tf.init_scope():  # out of a trace, where the variable's value can be read
            try:
                self._last[optimizer] = _iterations(optimizer)
            except Exception:  # not readable here: it starts from 0
                self._last[optimizer] = 0

    def settle(self) -> None:
        """Read every optimizer's ``iterations``; each step taken since the last read ends
        one step of the recorder (none while ``fit`` runs, whose callback counts them)."""
        steps = 0
        for optimizer, last in list(self._last.items()):
            now = _iterations(optimizer)
            self._last[optimizer] = now
            steps = max(steps, now - last)
        if self.in_fit:
            return
        for _ in range(steps):
            self._recorder.stepped()

    def passed(self) -> None:
        """Take the steps the optimizers took so far as counted (``fit``'s, counted by its
        callback)."""
        for optimizer in list(self._last):
            try:
                self._last[optimizer] = _iterations(optimizer)
            except Exception:  # fit's own error is the one to see
                continue

    def function_call(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``tf.function``'s ``__call__``, settling after each outermost eager call."""

        def __call__(function: Any, *args: Any, **kwargs: Any) -> Any:
            if not self._tf.executing_eagerly():  # called while another function is traced
                return original(function, *args, **kwargs)
            depth = getattr(self._calls, "depth", 0)
            self._calls.depth = depth + 1
            try:
                result = original(function, *args, **kwargs)
            finally:
                self._calls.depth = depth
            if depth == 0 and self._last:
                self.settle()
            return result

        return __call__

    def apply_gradients(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """An optimizer's ``apply_gradients``, noting its optimizer; an eager call outside
        every ``tf.function`` is a step of its own."""

        def apply_gradients(optimizer: Any, *args: Any, **kwargs: Any) -> Any:
            self.seen(optimizer)
            result = original(optimizer, *args, **kwargs)
            if self._tf.executing_eagerly() and not getattr(self._calls, "depth", 0):
                self.settle()
            return result

        return apply_gradients


def _iterations(optimizer: Any) -> int:
    return int(optimizer.iterations.read_value())


def install(tf: Any, recorder: StepRecorder) -> tuple[AppliedSteps, Callable[[], None]]:
    """Count the applied steps of every Keras optimizer (Keras 2's and its legacy ones) into
    ``recorder``; returns the counter and the removal of its hooks."""
    steps = AppliedSteps(tf, recorder)
    function_class = type(tf.function(lambda: None))
    patched: list[tuple[Any, str, Any]] = [
        (function_class, "__call__", steps.function_call(function_class.__call__))
    ]
    optimizer_classes = {tf.keras.optimizers.Optimizer}
    legacy = getattr(tf.keras.optimizers, "legacy", None)
    if legacy is not None:
        optimizer_classes.add(legacy.Optimizer)
    for cls in optimizer_classes:
        patched.append((cls, "apply_gradients", steps.apply_gradients(cls.apply_gradients)))
    originals = [(owner, name, owner.__dict__.get(name)) for owner, name, _ in patched]
    for owner, name, hook in patched:
        setattr(owner, name, hook)

    def remove() -> None:
        for owner, name, original in originals:
            if original is None:  # inherited: the hook goes, the base's shows again
                delattr(owner, name)
            else:
                setattr(owner, name, original)

    return steps, remove
