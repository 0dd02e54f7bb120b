"""Independent numpy models of the wrapped optimizers' update kernels.

Used to replay the K aggregated updates from the variables' values before the first step and
compare with the values TF ended with. Each function updates ``state`` (role -> array: the
variable and its slots, see :data:`placeviz.verify.plan.OPTIMIZERS`) from the non-state inputs the
kernel got, fetched in the chief's sync run (role -> array), with the op's boolean attributes
``attrs`` (``use_nesterov``, ``update_slots``, ``multiply_linear_by_lr``).

The arithmetic is that of TensorFlow's kernels, ``tensorflow/core/kernels/training_ops.cc`` (the
``functor::Apply*<CPUDevice, T>`` structs for the dense ops and the ``SparseApply*Op`` classes for
the sparse ones; every ``Resource*`` op is registered with the same kernel class) and, for the
scatter updates of ``GradientDescentOptimizer``, ``tensorflow/core/kernels/scatter_functor.h``
(``ScatterFunctorBase``). Which op each ``tf.compat.v1.train`` optimizer emits is in its
``tensorflow/python/training/<optimizer>.py`` (``_apply_dense``/``_resource_apply_dense``/
``_apply_sparse``/``_resource_apply_sparse``).

Sparse kernels walk ``indices`` in order and update row ``indices[i]`` with gradient row ``i``, the
dense arithmetic per row: a repeated index is applied twice, one after the other (the scatter ops
accumulate it). ``tf.compat.v1.train`` optimizers other than GradientDescent sum repeated indices
before their ``SparseApply*`` op (``optimizer.py::_deduplicate_indexed_slices``), so those ops see
unique indices; the models do what the kernel does either way. The replay computes in float64
(TF's variables are float32), so results agree to rounding, not bit for bit.
"""

from __future__ import annotations

import numpy as np

SLOT_ROLES = ("var", "accum", "m", "v", "ms", "mom", "mg", "accum_update", "linear", "gradient_accumulator",
              "gradient_squared_accumulator")
"""State roles updated by the kernels (every state role but Adam's beta powers, which
``AdamOptimizer._finish`` updates after all the step's updates)."""


def _attr(attrs, name: str, default: bool) -> bool:
    if attrs is None:
        return default
    if isinstance(attrs, bool):  # the old positional ``nesterov`` flag
        return attrs if name == "use_nesterov" else default
    return bool(attrs.get(name, default))


def _scalar(x) -> float:
    return float(np.asarray(x, np.float64).reshape(-1)[0])


# ------------------------------------------------------------------------------------------ dense


def gd(state: dict, inputs: dict, attrs=None) -> None:
    """``ApplyGradientDescent``: ``var -= alpha * delta`` (``functor::ApplyGradientDescent``;
    ``gradient_descent.py::_apply_dense``)."""
    state["var"] = state["var"] - inputs["alpha"] * inputs["delta"]


def proximal_gd(state: dict, inputs: dict, attrs=None) -> None:
    """``ApplyProximalGradientDescent`` (``functor::ApplyProximalGradientDescent``, FOBOS;
    ``proximal_gradient_descent.py``)::

        prox = var - alpha * delta
        var = sign(prox) * max(|prox| - alpha * l1, 0) / (1 + alpha * l2)   if l1 > 0
        var = prox / (1 + alpha * l2)                                        otherwise
    """
    alpha, l1, l2 = _scalar(inputs["alpha"]), _scalar(inputs["l1"]), _scalar(inputs["l2"])
    prox = state["var"] - inputs["delta"] * alpha
    if l1 > 0:
        state["var"] = np.sign(prox) * np.maximum(np.abs(prox) - alpha * l1, 0.0) / (1.0 + l2 * alpha)
    else:
        state["var"] = prox / (1.0 + l2 * alpha)


def momentum(state: dict, inputs: dict, attrs=None) -> None:
    """``ApplyMomentum`` (``functor::ApplyMomentum``; ``momentum.py``)::

        accum = accum * momentum + grad
        var -= grad * lr + accum * momentum * lr     (use_nesterov)
        var -= accum * lr                            (otherwise)
    """
    lr, grad, mom = inputs["lr"], inputs["grad"], inputs["momentum"]
    state["accum"] = state["accum"] * mom + grad
    if _attr(attrs, "use_nesterov", False):
        state["var"] = state["var"] - (grad * lr + state["accum"] * mom * lr)
    else:
        state["var"] = state["var"] - lr * state["accum"]


def adam(state: dict, inputs: dict, attrs=None) -> None:
    """``ApplyAdam`` (``functor::ApplyAdamNonCuda``; ``adam.py::_apply_dense``)::

        alpha = lr * sqrt(1 - beta2_power) / (1 - beta1_power)
        m += (grad - m) * (1 - beta1);  v += (grad^2 - v) * (1 - beta2)
        var -= m * alpha / (sqrt(v) + epsilon)                                (otherwise)
        var -= (grad * (1 - beta1) + beta1 * m) * alpha / (sqrt(v) + epsilon) (use_nesterov)

    The beta powers are not updated here: ``AdamOptimizer._finish`` multiplies them by beta1/beta2
    after every update of the step (the replay does it once per step).
    """
    b1p = state["beta1_power"] if "beta1_power" in state else inputs["beta1_power"]
    b2p = state["beta2_power"] if "beta2_power" in state else inputs["beta2_power"]
    lr, b1, b2, eps, g = inputs["lr"], inputs["beta1"], inputs["beta2"], inputs["epsilon"], inputs["grad"]
    alpha = lr * np.sqrt(1 - b2p) / (1 - b1p)
    state["m"] = state["m"] + (g - state["m"]) * (1 - b1)
    state["v"] = state["v"] + (g * g - state["v"]) * (1 - b2)
    step = (g * (1 - b1) + b1 * state["m"]) if _attr(attrs, "use_nesterov", False) else state["m"]
    state["var"] = state["var"] - step * alpha / (np.sqrt(state["v"]) + eps)


def adagrad(state: dict, inputs: dict, attrs=None) -> None:
    """``ApplyAdagrad`` (``functor::ApplyAdagrad``; ``adagrad.py``)::

        accum += grad^2          (update_slots, the default)
        var -= grad * lr * rsqrt(accum)
    """
    if _attr(attrs, "update_slots", True):
        state["accum"] = state["accum"] + inputs["grad"] * inputs["grad"]
    state["var"] = state["var"] - inputs["lr"] * inputs["grad"] / np.sqrt(state["accum"])


def adagrad_v2(state: dict, inputs: dict, attrs=None) -> None:
    """``ApplyAdagradV2`` (``functor::ApplyAdagradV2``; Keras' Adagrad, not ``tf.compat.v1.train``)::

        accum += grad^2          (update_slots)
        var -= grad * lr / (sqrt(accum) + epsilon)
    """
    if _attr(attrs, "update_slots", True):
        state["accum"] = state["accum"] + inputs["grad"] * inputs["grad"]
    state["var"] = state["var"] - inputs["grad"] * inputs["lr"] / (np.sqrt(state["accum"]) + inputs["epsilon"])


def adagrad_da(state: dict, inputs: dict, attrs=None) -> None:
    """``ApplyAdagradDA`` (``functor::ApplyAdagradDA``; ``adagrad_da.py``, whose ``global_step``
    input is the global step + 1)::

        gradient_accumulator += grad;  gradient_squared_accumulator += grad^2
        T = global_step
        var = -lr * sign(ga) * max(|ga| - T * l1, 0) / (l2 * T * lr + sqrt(gga))   if l1 > 0
        var = -lr * ga / (l2 * T * lr + sqrt(gga))                                   otherwise

    The new value does not depend on the old one: the accumulators carry the state.
    """
    lr, l1, l2 = _scalar(inputs["lr"]), _scalar(inputs["l1"]), _scalar(inputs["l2"])
    t = _scalar(inputs["global_step"])
    g = inputs["grad"]
    ga = state["gradient_accumulator"] = state["gradient_accumulator"] + g
    gga = state["gradient_squared_accumulator"] = state["gradient_squared_accumulator"] + g * g
    denom = l2 * t * lr + np.sqrt(gga)
    if l1 > 0:
        state["var"] = -lr * np.sign(ga) * np.maximum(np.abs(ga) - t * l1, 0.0) / denom
    else:
        state["var"] = -lr * ga / denom


def proximal_adagrad(state: dict, inputs: dict, attrs=None) -> None:
    """``ApplyProximalAdagrad`` (``functor::ApplyProximalAdagrad``; ``proximal_adagrad.py``)::

        accum += grad^2;  rate = lr * rsqrt(accum);  prox = var - grad * rate
        var = sign(prox) * max(|prox| - rate * l1, 0) / (1 + l2 * rate)   if l1 > 0
        var = prox / (1 + l2 * rate)                                       otherwise
    """
    lr, l1, l2 = _scalar(inputs["lr"]), _scalar(inputs["l1"]), _scalar(inputs["l2"])
    g = inputs["grad"]
    state["accum"] = state["accum"] + g * g
    rate = lr / np.sqrt(state["accum"])
    prox = state["var"] - g * rate
    if l1 > 0:
        state["var"] = np.sign(prox) * np.maximum(np.abs(prox) - rate * l1, 0.0) / (1.0 + l2 * rate)
    else:
        state["var"] = prox / (1.0 + l2 * rate)


def rmsprop(state: dict, inputs: dict, attrs=None) -> None:
    """``ApplyRMSProp`` (``functor::ApplyRMSProp``; ``rmsprop.py`` with ``centered=False``; its
    ``decay`` is the kernel's ``rho``)::

        ms += (grad^2 - ms) * (1 - rho)
        mom = mom * momentum + grad * lr / sqrt(ms + epsilon)
        var -= mom
    """
    g = inputs["grad"]
    state["ms"] = state["ms"] + (g * g - state["ms"]) * (1 - inputs["rho"])
    state["mom"] = state["mom"] * inputs["momentum"] + g * inputs["lr"] / np.sqrt(state["ms"] + inputs["epsilon"])
    state["var"] = state["var"] - state["mom"]


def centered_rmsprop(state: dict, inputs: dict, attrs=None) -> None:
    """``ApplyCenteredRMSProp`` (``functor::ApplyCenteredRMSProp``; ``rmsprop.py`` with
    ``centered=True``)::

        ms += (grad^2 - ms) * (1 - rho);  mg += (grad - mg) * (1 - rho)
        mom = mom * momentum + grad * lr / sqrt(ms - mg^2 + epsilon)
        var -= mom
    """
    g, rho = inputs["grad"], inputs["rho"]
    state["ms"] = state["ms"] + (g * g - state["ms"]) * (1 - rho)
    state["mg"] = state["mg"] + (g - state["mg"]) * (1 - rho)
    denom = (state["ms"] - state["mg"] * state["mg"]) + inputs["epsilon"]
    state["mom"] = state["mom"] * inputs["momentum"] + g * inputs["lr"] / np.sqrt(denom)
    state["var"] = state["var"] - state["mom"]


def adadelta(state: dict, inputs: dict, attrs=None) -> None:
    """``ApplyAdadelta`` (``functor::ApplyAdadelta``; ``adadelta.py``)::

        accum = accum * rho + grad^2 * (1 - rho)
        update = sqrt(accum_update + epsilon) * rsqrt(accum + epsilon) * grad
        var -= update * lr
        accum_update = accum_update * rho + update^2 * (1 - rho)
    """
    g, rho, eps = inputs["grad"], inputs["rho"], inputs["epsilon"]
    state["accum"] = state["accum"] * rho + g * g * (1 - rho)
    update = np.sqrt(state["accum_update"] + eps) / np.sqrt(state["accum"] + eps) * g
    state["var"] = state["var"] - update * inputs["lr"]
    state["accum_update"] = state["accum_update"] * rho + update * update * (1 - rho)


def _ftrl(state: dict, inputs: dict, attrs, shrinkage: bool) -> None:
    lr, l1, l2 = _scalar(inputs["lr"]), _scalar(inputs["l1"]), _scalar(inputs["l2"])
    power = _scalar(inputs["lr_power"])
    g, var, accum = inputs["grad"], state["var"], state["accum"]
    g_shrunk = g + 2.0 * _scalar(inputs["l2_shrinkage"]) * var if shrinkage else g
    new_accum = accum + g * g

    def pw(a):
        return np.sqrt(a) if power == -0.5 else np.power(a, -power)

    sigma = pw(new_accum) - pw(accum)
    if _attr(attrs, "multiply_linear_by_lr", False):
        state["linear"] = state["linear"] + g_shrunk * lr - sigma * var
        limit, y = l1 * lr, pw(new_accum) + 2.0 * l2 * lr
    else:
        state["linear"] = state["linear"] + g_shrunk - sigma / lr * var
        limit, y = l1, pw(new_accum) / lr + 2.0 * l2
    linear = state["linear"]
    state["var"] = np.where(np.abs(linear) > limit, (limit * np.sign(linear) - linear) / y, 0.0)
    state["accum"] = new_accum


def ftrl(state: dict, inputs: dict, attrs=None) -> None:
    """``ApplyFtrl`` (``functor::ApplyFtrl`` / ``functor::ApplyFtrlMultiplyLinearByLr``;
    ``ftrl.py`` when ``l2_shrinkage_regularization_strength <= 0``; its ``l2`` input is
    ``l2_regularization_strength + beta / (2 * lr)``)::

        new_accum = accum + grad^2;  s = new_accum^-lr_power - accum^-lr_power  (sqrt for -0.5)
        linear += grad - s / lr * var;  y = new_accum^-lr_power / lr + 2 * l2;  limit = l1
          (multiply_linear_by_lr: linear += grad * lr - s * var; y = new_accum^-lr_power + 2 * l2 * lr;
           limit = l1 * lr)
        var = (limit * sign(linear) - linear) / y  if |linear| > limit  else 0
        accum = new_accum
    """
    _ftrl(state, inputs, attrs, shrinkage=False)


def ftrl_v2(state: dict, inputs: dict, attrs=None) -> None:
    """``ApplyFtrlV2`` (``functor::ApplyFtrlV2`` / ``functor::ApplyFtrlV2MultiplyLinearByLr``;
    ``ftrl.py`` with ``l2_shrinkage_regularization_strength > 0``): :func:`ftrl` with
    ``grad + 2 * l2_shrinkage * var`` in the linear update (the accumulator still adds ``grad^2``).
    ``multiply_linear_by_lr`` follows the op's attribute as TF 2.21's CPU kernel does."""
    _ftrl(state, inputs, attrs, shrinkage=True)


# ------------------------------------------------------------------------------------------ sparse


def _rows(dense, grad_role: str = "grad"):
    """The ``SparseApply*`` kernel of ``dense``: row ``indices[i]`` of the variable and its slots
    gets ``dense``'s arithmetic with gradient row ``i`` (input ``grad_role``), for i in order."""

    def sparse(state: dict, inputs: dict, attrs=None) -> None:
        indices = np.asarray(inputs["indices"]).reshape(-1)
        grad = np.asarray(inputs[grad_role])
        slots = [r for r in SLOT_ROLES if r in state]
        for r in slots:
            state[r] = np.array(state[r], np.float64)  # a copy: rows are written in place
        for i, row in enumerate(indices):
            local = {r: state[r][row] for r in slots}
            for r in state:
                if r not in slots:
                    local[r] = state[r]
            dense(local, {**inputs, grad_role: grad[i]}, attrs)
            for r in slots:
                state[r][row] = local[r]

    sparse.__name__ = f"sparse_{dense.__name__}"
    sparse.__doc__ = (f"``SparseApply*`` twin of :func:`{dense.__name__}` (the kernel's ``SparseApply*Op``: a loop "
                      "over ``indices``, the dense arithmetic on each row).")
    return sparse


sparse_momentum = _rows(momentum)
sparse_adagrad = _rows(adagrad)
sparse_adagrad_v2 = _rows(adagrad_v2)
sparse_adagrad_da = _rows(adagrad_da)
sparse_proximal_gd = _rows(proximal_gd, "delta")  # the table names its gradient "delta" like the dense op
sparse_proximal_adagrad = _rows(proximal_adagrad)
sparse_rmsprop = _rows(rmsprop)
sparse_centered_rmsprop = _rows(centered_rmsprop)
sparse_adadelta = _rows(adadelta)
sparse_ftrl = _rows(ftrl)
sparse_ftrl_v2 = _rows(ftrl_v2)


def scatter_sub(state: dict, inputs: dict, attrs=None) -> None:
    """``ScatterSub``/``ResourceScatterSub``: ``var[indices[i]] -= updates[i]`` for every i in order
    (``scatter_functor.h``: ``ScatterFunctorBase`` with ``UpdateOp::SUB``), so a repeated index is
    subtracted once per occurrence. ``GradientDescentOptimizer._apply_sparse_duplicate_indices``
    emits it for a ref variable with ``updates = grad.values * lr``, without summing duplicates."""
    var = np.array(state["var"], np.float64)
    np.subtract.at(var, np.asarray(inputs["indices"]), inputs["updates"])
    state["var"] = var


def scatter_add(state: dict, inputs: dict, attrs=None) -> None:
    """``ScatterAdd``/``ResourceScatterAdd``: ``var[indices[i]] += updates[i]`` for every i in order
    (``UpdateOp::ADD``). ``GradientDescentOptimizer._resource_apply_sparse_duplicate_indices`` emits
    ``ResourceScatterAdd`` for a resource variable with ``updates = -grad * lr``."""
    var = np.array(state["var"], np.float64)
    np.add.at(var, np.asarray(inputs["indices"]), inputs["updates"])
    state["var"] = var


UPDATES = {
    "gd": gd, "proximal_gd": proximal_gd, "momentum": momentum, "adam": adam, "adagrad": adagrad,
    "adagrad_v2": adagrad_v2, "adagrad_da": adagrad_da, "proximal_adagrad": proximal_adagrad, "rmsprop": rmsprop,
    "centered_rmsprop": centered_rmsprop, "adadelta": adadelta, "ftrl": ftrl, "ftrl_v2": ftrl_v2,
    "sparse_momentum": sparse_momentum, "sparse_adagrad": sparse_adagrad, "sparse_adagrad_v2": sparse_adagrad_v2,
    "sparse_adagrad_da": sparse_adagrad_da, "sparse_proximal_gd": sparse_proximal_gd,
    "sparse_proximal_adagrad": sparse_proximal_adagrad, "sparse_rmsprop": sparse_rmsprop,
    "sparse_centered_rmsprop": sparse_centered_rmsprop, "sparse_adadelta": sparse_adadelta,
    "sparse_ftrl": sparse_ftrl, "sparse_ftrl_v2": sparse_ftrl_v2, "scatter_sub": scatter_sub,
    "scatter_add": scatter_add,
}
