"""Independent numpy models of the wrapped optimizers' update kernels (TF ``training_ops.cc``).

Used to replay the K aggregated updates from the variables' values before the first step and
compare with the values TF ended with. Each function updates ``state`` (role -> array) in place
from the fetched non-state inputs (role -> array).
"""

from __future__ import annotations

import numpy as np


def gd(state: dict, inputs: dict, nesterov: bool = False) -> None:
    state["var"] = state["var"] - inputs["alpha"] * inputs["delta"]


def momentum(state: dict, inputs: dict, nesterov: bool = False) -> None:
    lr, grad, mom = inputs["lr"], inputs["grad"], inputs["momentum"]
    state["accum"] = state["accum"] * mom + grad
    if nesterov:
        state["var"] = state["var"] - (grad * lr + state["accum"] * mom * lr)
    else:
        state["var"] = state["var"] - lr * state["accum"]


def adam(state: dict, inputs: dict, nesterov: bool = False) -> None:
    b1p = state["beta1_power"] if "beta1_power" in state else inputs["beta1_power"]
    b2p = state["beta2_power"] if "beta2_power" in state else inputs["beta2_power"]
    lr, b1, b2, eps, g = inputs["lr"], inputs["beta1"], inputs["beta2"], inputs["epsilon"], inputs["grad"]
    alpha = lr * np.sqrt(1 - b2p) / (1 - b1p)
    state["m"] = state["m"] + (g - state["m"]) * (1 - b1)
    state["v"] = state["v"] + (g * g - state["v"]) * (1 - b2)
    step = (g * (1 - b1) + b1 * state["m"]) if nesterov else state["m"]
    state["var"] = state["var"] - step * alpha / (np.sqrt(state["v"]) + eps)


def adagrad(state: dict, inputs: dict, nesterov: bool = False) -> None:
    state["accum"] = state["accum"] + inputs["grad"] * inputs["grad"]
    state["var"] = state["var"] - inputs["lr"] * inputs["grad"] / np.sqrt(state["accum"])


UPDATES = {"gd": gd, "momentum": momentum, "adam": adam, "adagrad": adagrad}
