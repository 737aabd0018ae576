"""Data sets the integration tests generate or load from installed packages."""

import numpy as np

COEFFICIENTS = np.array([2.0, -3.0, 0.5])
INTERCEPT = 1.0


def digits_split():
    """scikit-learn's digits (shipped with the package), scaled, 75/25 split."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).astype("float32")
    return train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)


def linear_rows(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = X @ COEFFICIENTS + INTERCEPT
    return X, y


def rows(X, y):
    return [([float(v) for v in x], float(t)) for x, t in zip(X, y)]
