"""MAPIE's split conformal sets on stored predictions: the reference of tests/calibration/test_conformal.py and
benchmarks/conformal.py (MAPIE wants a fitted sklearn classifier; stored predictions become one)."""

import numpy as np


def lookup(probs: np.ndarray):
    """Stored predictions as a fitted sklearn classifier: X holds row numbers into `probs`."""
    from sklearn.base import BaseEstimator, ClassifierMixin

    class Lookup(ClassifierMixin, BaseEstimator):
        def __init__(self, table):
            self.table = table

        def fit(self, X, y=None):
            self.classes_, self.n_features_in_ = np.arange(self.table.shape[1]), 1
            return self

        def predict_proba(self, X):
            return self.table[np.asarray(X, dtype=int).ravel()]

        def predict(self, X):  # MAPIE checks a prefit estimator by predicting once
            return self.predict_proba(X).argmax(axis=1)

    return Lookup(probs).fit(None)
