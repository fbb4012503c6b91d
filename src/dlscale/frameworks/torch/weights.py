"""The PyTorch twin's weights as numpy arrays, for the other frameworks' twins to start from.

``weights = "torch"`` (the default of the TensorFlow and MXNet backends) makes every engine start
where a PyTorch run starts: the model every torch rank builds (same seed), read out by
state-dict key. The other frameworks reach this through the framework registry
(``FrameworkSpec.initial_state``), never by importing this folder.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dlscale.frameworks.torch.loop import build_model


def torch_state(model: Any) -> dict[str, np.ndarray]:
    """A PyTorch module's parameters and buffers as float32 numpy arrays, by state-dict key."""
    return {
        key: value.detach().cpu().float().numpy()
        for key, value in model.state_dict().items()
        if not key.endswith("num_batches_tracked")
    }


def initial_state(cfg: Any) -> dict[str, np.ndarray]:
    """The initial weights of the run's model as every torch rank builds them."""
    return torch_state(build_model(cfg))
