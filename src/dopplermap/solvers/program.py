"""The compiled objective: one float64 value-and-gradient (and a value-only twin) per problem shape.

Every back end iterates on the same body, :func:`value_and_grad_body`: scipy's L-BFGS-B
calls it compiled (:func:`compiled_value_and_grad`), the device and batch solves trace it
into their loops (:mod:`dopplermap.solvers.batch`), and the front door evaluates a solve's
reported loss and terms with :func:`compiled_terms`. Its arguments are ``(x, lmbd, pre,
data)``: the map vector, lambda, the model form and the :class:`~dopplermap.objective.ObjectiveData`
pytree (observations, light curve and weights, offset prior), so a new data set, lambda or
weight of the same shape reuses the compiled program. Compiled ahead of time, so compile
time is measured apart from the solve (:mod:`dopplermap.compiled`).
"""

from __future__ import annotations

import jax

from ..compiled import compile_cached, compiled_program, loop_options
from ..objective import ObjectiveData, data_terms

__all__ = ["value_and_grad_body", "terms_body", "compiled_value_and_grad", "compiled_terms"]


def value_and_grad_body(x, lmbd, pre, data: ObjectiveData, *, regulariser, penalty):
    """``(loss, grad, Terms)`` (with the model profiles) of ``x``."""
    (val, aux), grad = jax.value_and_grad(
        lambda x: data_terms(x, lmbd, pre, data, regulariser, penalty, with_model=True), has_aux=True)(x)
    return val, grad, aux


def terms_body(x, lmbd, pre, data: ObjectiveData, *, regulariser, penalty):
    """``(loss, Terms)`` (with the model profiles) of ``x``, no gradient."""
    return data_terms(x, lmbd, pre, data, regulariser, penalty, with_model=True)


def compiled_value_and_grad(x, lmbd, pre, data: ObjectiveData, regulariser="mem", penalty=1e4):
    """AOT-compiled ``(x, lmbd, pre, data) -> (loss, grad, Terms)``.

    Returns ``(fn, timings)`` where ``timings`` holds ``trace_lower`` and ``compile``
    seconds (both 0 when the function came from this process's cache).
    """
    return compile_cached("value_and_grad", value_and_grad_body, (x, lmbd, pre, data),
                          {"regulariser": regulariser, "penalty": penalty})


def compiled_terms(x, lmbd, pre, data: ObjectiveData, regulariser="mem", penalty=1e4):
    """``(x, lmbd, pre, data) -> (loss, Terms)``: the loss and its terms without the gradient,
    for a solve's final evaluation. It is the value-and-gradient of the same signature when
    this process has compiled one (an L-BFGS-B solve just did), else a value-only program: a
    Newton or device solve needs no gradient program, and the value alone compiles in a
    fraction of the time. Returns ``(fn, timings)`` as :func:`compiled_value_and_grad`."""
    args = (x, lmbd, pre, data)
    static = {"regulariser": regulariser, "penalty": penalty}
    vg = compiled_program("value_and_grad", value_and_grad_body, args, static)
    if vg is not None:
        return (lambda *a: _drop_grad(vg(*a))), {"trace_lower": 0.0, "compile": 0.0, "cached": True}
    return compile_cached("objective_terms", terms_body, args, static, options=loop_options())


def _drop_grad(out):
    val, _, terms = out
    return val, terms
