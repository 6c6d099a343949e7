"""Post-hoc recalibration: fit a map on validation predictions, apply it to test predictions.

Every recalibrator works on probabilities ``probs`` of shape (N, C) (as in
``peftviz.calibration.metrics``), is fitted with ``Cls.fit(val_probs, val_labels)`` and applied with
``fitted.transform(test_probs)``, which returns float64 probabilities of the same shape whose
rows sum to 1. ``RECALIBRATORS`` maps a name to its class; ``recalibrate`` does both steps.
Below, z = log(max(p, 1e-12)) (``metrics.log_probs``): only probabilities are stored, so
z is the log-softmax of the model's logits, i.e. the logits up to a per-row shift.

* ``"temperature"`` (Guo et al. 2017): p -> softmax(z / T), one T > 0 fitted by NLL. Wraps
  ``metrics.fit_temperature`` / ``apply_temperature``. Never changes the argmax.
* ``"vector"`` (Guo et al. 2017): p -> softmax(w ⊙ z + b), w, b in R^C, fitted by minimising
  NLL(w, b) = mean_i [logsumexp_k(w_k z_ik + b_k) - (w_y z_iy + b_y)] with L-BFGS-B and the
  analytic gradient dNLL/du_ik = (softmax(u_i)_k - 1[y_i = k]) / N, u = w ⊙ z + b. NLL is
  convex in (w, b) (log-sum-exp of a linear map), so the local optimum is global. b is only
  defined up to a common shift (softmax is shift-invariant), so the fitted b is centred to
  mean 0. Bounds keep the fit finite where the unregularised MLE diverges (separable
  validation data, e.g. one-hot correct predictions; a class absent from validation, whose
  b_k would run to -inf): w_k in [e^-5, e^5] (the range of 1/T in ``fit_temperature``, and
  w_k > 0 keeps each class's calibrated logit increasing in its own log-probability) and
  b_k in [-30, 30] (e^-30 ~ 1e-13 is below the 1e-12 probability floor). Because z is
  log p rather than the raw logits, w ⊙ z differs from w ⊙ logits by the per-row term
  -w * logsumexp(logits), which is not a uniform shift unless all w_k are equal; with equal
  w the map is exactly temperature scaling with T = 1 / w.
* ``"isotonic"`` (Zadrozny & Elkan 2002): one-vs-rest. For each class k, an isotonic
  (non-decreasing) regression of 1[y = k] on p_k, clipped to [0, 1], is fitted on the
  validation set (sklearn ``IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip")``,
  which pools tied p_k and holds the end values outside the fitted range). The test p_k go
  through their class's map and each row is divided by its sum. A row whose mapped values
  are all 0 becomes uniform (1 / C): the maps say "none of these", which carries no
  preference between classes. A class absent from the validation labels gets the constant
  map 0, so it has probability 0 on every test row after renormalisation (its test
  examples then score the NLL floor -log 1e-12 ~ 27.6), except on rows that fall back to
  uniform. Isotonic maps are step functions,
  so ties and argmax changes are normal.

Library decision (measured with netcal 1.4.0, scikit-learn 1.9.1, torch 2.13 CPU, on
213 x 5 over-confident synthetic probabilities):

* netcal's multiclass ``LogisticCalibration`` *is* vector scaling, not matrix scaling: its
  model is ``torch.mul(x, w) + b`` with C weights and C biases on x = log(clip(p, eps)), and
  ``TemperatureScaling`` is the same class with ``temperature_only=True``. It is not used:
  any ``import netcal.scaling`` (or ``netcal.binning``) pulls in torch, pyro and
  tensorboard (2.6-4 s); the "mle" fit calls scipy's L-BFGS-B with a finite-difference
  gradient, 341 NLL evaluations through ``pyro.condition`` for C = 5 (0.3 s warm, 2.1 s on
  the first fit in a process, against milliseconds here with the analytic gradient); for
  C = 2 it silently switches to binary Platt scaling on p[:, 1] (one weight, one bias) and
  returns a 1-D array; and it returns float32 for float32 input.
* netcal's ``binning.IsotonicRegression`` is exactly sklearn's ``IsotonicRegression(y_min=0,
  y_max=1, increasing=True, out_of_bounds="clip")`` fitted one-vs-rest and renormalised, so
  sklearn is used directly. netcal adds the torch import, print()s warnings for a class
  absent from validation (and skips it, giving the same column of zeros as here), returns
  NaN rows (0/0) where every mapped value is 0, and for C = 2 fits only p[:, 1] and returns
  a 1-D array.

Example
-------
An overconfident model (``true`` sharpened by a temperature of 0.5) on labels drawn from ``true``;
each map is fitted on the first 100 predictions and applied to the other 100. Isotonic maps give
some test probabilities of exactly 0, and a wrong one scores the NLL floor:

>>> from peftviz.calibration.metrics import accuracy, apply_temperature, ece, nll
>>> rng = np.random.default_rng(0)
>>> true = rng.dirichlet([1, 1, 1], size=200)
>>> labels = (true.cumsum(axis=1) > rng.random((200, 1))).argmax(axis=1)
>>> probs = apply_temperature(true, 0.5)
>>> val, test = slice(0, 100), slice(100, 200)
>>> print(f"none        ECE {ece(probs[test], labels[test]):.4f}  NLL {nll(probs[test], labels[test]):.4f}")
none        ECE 0.1737  NLL 0.8927
>>> for name in RECALIBRATORS:
...     out = recalibrate(probs[val], labels[val], probs[test], name)
...     print(f"{name:11s} ECE {ece(out, labels[test]):.4f}  NLL {nll(out, labels[test]):.4f}"
...           f"  accuracy {accuracy(out, labels[test]):.2f}")
temperature ECE 0.0655  NLL 0.8060  accuracy 0.58
vector      ECE 0.0883  NLL 0.8279  accuracy 0.61
isotonic    ECE 0.0894  NLL 1.2938  accuracy 0.61
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from peftviz.calibration.checks import check_inputs, check_probs
from peftviz.calibration.metrics import LOG_TEMPERATURE_BOUNDS, apply_temperature, fit_temperature, log_probs, softmax
from peftviz.errors import ConfigError

VECTOR_WEIGHT_BOUNDS = (float(np.exp(LOG_TEMPERATURE_BOUNDS[0])), float(np.exp(LOG_TEMPERATURE_BOUNDS[1])))
VECTOR_BIAS_BOUNDS = (-30.0, 30.0)


def _check_n_classes(probs: np.ndarray, n_classes: int, what: str) -> None:
    if probs.shape[1] != n_classes:
        raise ConfigError(f"{what} has {probs.shape[1]} classes, but the recalibrator was fitted on {n_classes}")


# ---------------------------------------------------------------- temperature


@dataclass(frozen=True)
class TemperatureScaling:
    """softmax(log p / T) with one fitted T > 0 (``metrics.fit_temperature``).

    >>> val_probs = np.array([[0.9, 0.1], [0.9, 0.1], [0.9, 0.1], [0.9, 0.1]])  # 90% sure, 75% right
    >>> scaling = TemperatureScaling.fit(val_probs, [0, 0, 0, 1])
    >>> round(scaling.temperature, 4)  # log 9 / T = log 3: softmax gives 0.75
    2.0
    >>> np.round(scaling.transform([[0.9, 0.1], [0.1, 0.9]]), 4)
    array([[0.75, 0.25],
           [0.25, 0.75]])
    """

    description: ClassVar[str] = "one temperature T for all classes: softmax(log p / T); keeps the argmax"
    temperature: float
    n_classes: int

    @classmethod
    def fit(cls, probs, labels) -> TemperatureScaling:
        probs, labels = check_inputs(probs, labels)
        return cls(temperature=fit_temperature(probs, labels), n_classes=probs.shape[1])

    def transform(self, probs) -> np.ndarray:
        probs = check_probs(probs)
        _check_n_classes(probs, self.n_classes, "probs")
        return apply_temperature(probs, self.temperature)


# ---------------------------------------------------------------- vector scaling


def _vector_nll_and_grad(params: np.ndarray, logits: np.ndarray, labels: np.ndarray) -> tuple[float, np.ndarray]:
    """NLL of softmax(w ⊙ z + b) and its gradient; params = concat(w, b), z = ``logits``.

    NLL = mean_i [logsumexp(u_i) - u_{i,y_i}], u = w ⊙ z + b;  G = (softmax(u) - onehot(y)) / N;
    dNLL/dw = sum_i G_i ⊙ z_i,  dNLL/db = sum_i G_i.
    """
    n_examples, n_classes = logits.shape
    weights, bias = params[:n_classes], params[n_classes:]
    scaled = logits * weights + bias
    top = scaled.max(axis=1, keepdims=True)
    exp_shifted = np.exp(scaled - top)
    normaliser = exp_shifted.sum(axis=1, keepdims=True)
    rows = np.arange(n_examples)
    nll = float(np.mean(top[:, 0] + np.log(normaliser[:, 0]) - scaled[rows, labels]))
    residual = exp_shifted / normaliser
    residual[rows, labels] -= 1.0
    residual /= n_examples
    return nll, np.concatenate([(residual * logits).sum(axis=0), residual.sum(axis=0)])


@dataclass(frozen=True)
class VectorScaling:
    """softmax(w ⊙ log p + b), w, b in R^C fitted by NLL (Guo et al. 2017); b centred to mean 0.

    >>> from peftviz.calibration.metrics import apply_temperature
    >>> rng = np.random.default_rng(0)
    >>> true = rng.dirichlet([1, 1, 1], size=200)
    >>> labels = (true.cumsum(axis=1) > rng.random((200, 1))).argmax(axis=1)
    >>> scaling = VectorScaling.fit(apply_temperature(true, 0.5)[:100], labels[:100])  # overconfident
    >>> np.round(scaling.weights, 4), np.round(scaling.bias, 4)  # w < 1 softens, as 1 / T does
    (array([0.6405, 0.2951, 0.6554]), array([ 0.1801, -0.2308,  0.0506]))
    >>> scaling.n_classes, round(float(scaling.bias.sum()), 10)
    (3, 0.0)
    """

    description: ClassVar[str] = "per-class scale and bias: softmax(w ⊙ log p + b), 2C parameters"
    weights: np.ndarray
    bias: np.ndarray

    @classmethod
    def fit(cls, probs, labels) -> VectorScaling:
        from scipy.optimize import minimize  # local: keeps `import peftviz.calibration.recalibration` light

        probs, labels = check_inputs(probs, labels)
        logits = log_probs(probs)
        n_classes = probs.shape[1]
        start = np.concatenate([np.ones(n_classes), np.zeros(n_classes)])  # identity map
        result = minimize(
            _vector_nll_and_grad,
            start,
            args=(logits, labels),
            jac=True,
            method="L-BFGS-B",
            bounds=[VECTOR_WEIGHT_BOUNDS] * n_classes + [VECTOR_BIAS_BOUNDS] * n_classes,
            options={"maxiter": 1000, "ftol": 1e-12, "gtol": 1e-9},
        )
        bias = result.x[n_classes:]
        return cls(weights=result.x[:n_classes].copy(), bias=bias - bias.mean())

    @property
    def n_classes(self) -> int:
        return self.weights.shape[0]

    def transform(self, probs) -> np.ndarray:
        probs = check_probs(probs)
        _check_n_classes(probs, self.n_classes, "probs")
        return softmax(log_probs(probs) * self.weights + self.bias)


# ---------------------------------------------------------------- isotonic regression


@dataclass(frozen=True)
class IsotonicCalibration:
    """One-vs-rest isotonic regression of 1[y = k] on p_k, then rows renormalised (Zadrozny & Elkan 2002).

    Validation: class 0 is right at p_0 = 0.8 and 0.9 and wrong at 0.3 and 0.6, so its map steps from
    0 to 1; likewise class 1's. A test row below both steps maps to (0, 0) and becomes uniform:

    >>> iso = IsotonicCalibration.fit([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]], [0, 0, 1, 1])
    >>> iso.class_scores([[0.1, 0.05], [0.9, 0.1]])
    array([[0., 0.],
           [1., 0.]])
    >>> iso.transform([[0.1, 0.05], [0.9, 0.1]])
    array([[0.5, 0.5],
           [1. , 0. ]])
    """

    description: ClassVar[str] = "per-class isotonic map of p_k, one-vs-rest, rows renormalised"
    models: tuple  # one fitted sklearn IsotonicRegression per class

    @classmethod
    def fit(cls, probs, labels) -> IsotonicCalibration:
        from sklearn.isotonic import IsotonicRegression  # local: sklearn imports slowly

        probs, labels = check_inputs(probs, labels)
        models = tuple(
            IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip").fit(
                probs[:, k], (labels == k).astype(np.float64)
            )
            for k in range(probs.shape[1])
        )
        return cls(models=models)

    @property
    def n_classes(self) -> int:
        return len(self.models)

    def class_scores(self, probs) -> np.ndarray:
        """Per-class isotonic outputs before renormalisation: column k is non-decreasing in p_k."""
        probs = check_probs(probs)
        _check_n_classes(probs, self.n_classes, "probs")
        return np.column_stack([model.predict(probs[:, k]) for k, model in enumerate(self.models)]).astype(np.float64)

    def transform(self, probs) -> np.ndarray:
        scores = self.class_scores(probs)
        totals = scores.sum(axis=1, keepdims=True)
        uniform = np.full_like(scores, 1.0 / scores.shape[1])
        with np.errstate(invalid="ignore", divide="ignore"):  # all-zero rows -> uniform below
            return np.where(totals > 0, scores / totals, uniform)


# ---------------------------------------------------------------- registry


RECALIBRATORS: dict[str, type] = {
    "temperature": TemperatureScaling,
    "vector": VectorScaling,
    "isotonic": IsotonicCalibration,
}


def describe() -> dict[str, str]:
    """Name -> one-line description, in registry order.

    >>> describe()["temperature"]
    'one temperature T for all classes: softmax(log p / T); keeps the argmax'
    >>> list(describe()) == list(RECALIBRATORS)
    True
    """
    return {name: cls.description for name, cls in RECALIBRATORS.items()}


def recalibrate(val_probs, val_labels, test_probs, name: str) -> np.ndarray:
    """Fit recalibrator ``name`` on (val_probs, val_labels) and return it applied to test_probs.

    >>> val_probs, val_labels = [[0.9, 0.1], [0.9, 0.1], [0.9, 0.1], [0.9, 0.1]], [0, 0, 0, 1]
    >>> np.round(recalibrate(val_probs, val_labels, [[0.9, 0.1], [0.5, 0.5]], "temperature"), 4)
    array([[0.75, 0.25],
           [0.5 , 0.5 ]])
    >>> recalibrate(val_probs, val_labels, [[0.9, 0.1]], "platt")
    Traceback (most recent call last):
    ...
    peftviz.errors.ConfigError: unknown recalibrator 'platt', expected one of ('temperature', 'vector', 'isotonic')
    """
    if name not in RECALIBRATORS:
        raise ConfigError(f"unknown recalibrator {name!r}, expected one of {tuple(RECALIBRATORS)}")
    val_probs, val_labels = check_inputs(val_probs, val_labels)
    test_probs = check_probs(test_probs)
    if test_probs.shape[1] != val_probs.shape[1]:
        raise ConfigError(f"test_probs has {test_probs.shape[1]} classes but val_probs has {val_probs.shape[1]}")
    return RECALIBRATORS[name].fit(val_probs, val_labels).transform(test_probs)
