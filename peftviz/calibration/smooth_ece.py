"""Smooth ECE of many bootstrap resamples at once, computed as ``relplot.smECE`` computes it.

Definition (Blasiok & Nakkiran 2023, "Smooth ECE: principled reliability diagrams via kernel
smoothing"; their package relplot 1.0.3, ``metrics.smECE`` with its defaults): for confidences c_i in
[0, 1], correctness h_i in {0, 1} and a bandwidth sigma, with K_sigma a Gaussian of width sigma
reflected at 0 and 1,

    dens(t) = sum_i K_sigma(t, c_i) + 1e-4                  kernel density of the confidences
    r(t)    = sum_i K_sigma(t, c_i) (c_i - h_i) / dens(t)   smoothed residual: confidence - accuracy
    smECE_sigma = sum_t |r(t)| dens(t) / sum_t dens(t)      over a mesh t = linspace(0, 1, T)

and smECE = smECE_sigma* at the bandwidth where smECE_sigma* = sigma*, found by bisection on [0, 1]
(relplot's ``search_param``): sigma = 1 if 1 < smECE_1, else 10 halvings of [0, 1], each testing
the midpoint m with ``m < 0.001 or m < smECE_m``; sigma* is the last midpoint where that fails
(or 1), so it is a multiple of 2^-10.

relplot discretizes K_sigma (``ReflectedGaussianKernel.apply``), and so does this module, step for step:
    1. splat: example i adds (1 - frac_i) w_i to grid point b_i and frac_i w_i to b_i + 1 of an
       E-point grid on [0, 1], E = max(2000, round(20 / sigma)) // 2 + 1 (``smooth_round_to_grid``);
    2. smooth: convolve the grid values with the Gaussian sampled on E points, the values reflected
       at both ends first ([flip(v)[:-1], v, flip(v)[1:]], then np.convolve "valid");
    3. read off: linear interpolation of the smoothed grid at the T = max(round(10 / sigma), 200)
       mesh points (``interpolate``).

Why own code: relplot takes one set of predictions per call and searches the bandwidth in Python,
7-12 ms a call; a bootstrap of 1000 resamples spent 7 s there. Here all R resamples go at once.
A resample is a vector of example counts m (R, N), and every step above is linear in the weights
w, so for one sigma the steps are two matrices shared by all rows: the splat S (N, J), sparse, two
entries a row, over the J <= min(2N, E) grid points that receive weight, and the read-off R (J, T)
= reflected convolution then interpolation. Then, for all rows at once,

    sum_i K_sigma(t, c_i) over the examples of resample r             = (m @ S @ R)[r, t]
    sum_i K_sigma(t, c_i) (c_i - h_i) over the examples of resample r = ((m * (c - h)) @ S @ R)[r, t]

In each bisection step the rows are grouped by their midpoint (a multiple of 2^-k: a few distinct
values per step) and each group costs two matrix products. relplot stays the reference: the tests
check every row against ``relplot.smECE(c[row], h[row], return_width=True)``.

Example: 200 predictions overconfident by about 0.1, on all data and on three bootstrap resamples;
every row is relplot's value, and every bandwidth a multiple of 2^-10:

>>> import relplot
>>> rng = np.random.default_rng(0)
>>> confidence = rng.uniform(0.5, 1.0, 200)
>>> correct = rng.random(200) < confidence - 0.1
>>> rows = np.vstack([np.arange(200), rng.integers(0, 200, size=(3, 200))])  # all data, then 3 resamples
>>> eces, sigmas = resampled_smooth_ece(confidence, correct, rows)
>>> round(float(eces[0]), 4), float(sigmas[0] * 1024)
(0.1296, 133.0)
>>> reference = [relplot.smECE(confidence[row], correct[row].astype(float)) for row in rows]
>>> bool(np.allclose(eces, reference, rtol=0, atol=1e-12))
True
"""

from __future__ import annotations

import numpy as np

from peftviz.errors import ConfigError

EPS = 0.001  # relplot.smECE's eps: a bandwidth below it passes the search's test without computing
BISECTION_STEPS = 10  # relplot.metrics.search_param's refine
DENSITY_FLOOR = 1e-4  # relplot.kernels.BaseKernelMixin.smooth's eps, added to the density
MESH_POINTS = 200  # relplot.config.smECE_mesh_pts
_CHUNK_ELEMENTS = 2_000_000  # elements of one work array (rows x N, rows x mesh, grid x mesh): 16 MB each


# ---------------------------------------------------------------- relplot's sizes and kernel


def grid_points(sigma: float) -> int:
    """E: the kernel grid of GaussianKernel.apply.

    >>> grid_points(0.1), grid_points(0.001)  # max(2000, 20 / sigma) // 2 + 1
    (1001, 10001)
    """
    return max(2000, round(20 / sigma)) // 2 + 1


def mesh_points(sigma: float) -> int:
    """T: the evaluation mesh of relplot.metrics.smooth_ece.

    >>> mesh_points(0.1), mesh_points(0.01)  # max(10 / sigma, 200)
    (200, 1000)
    """
    return max(round(10 / sigma), MESH_POINTS)


def gaussian_on_grid(sigma: float, n_points: int) -> np.ndarray:
    """(E,) the Gaussian of GaussianKernel.kernel_ev: centred at 0.5, sampled on linspace(0, 1, E).

    >>> kernel = gaussian_on_grid(0.1, 1001)
    >>> int(kernel.argmax()), round(float(kernel.sum() / 1000), 4)  # its peak at 0.5, a pdf: step 1/1000
    (500, 1.0)
    """
    t = np.linspace(0, 1, n_points)
    return np.exp(-(t - 0.5) * (t - 0.5) / (2 * sigma**2)) / (np.sqrt(2 * np.pi) * sigma)


# ---------------------------------------------------------------- the three steps as two matrices


def reflected_convolution_weight(kernel: np.ndarray, j: np.ndarray, i: np.ndarray) -> np.ndarray:
    """Weight of grid value j in relplot's reflected convolution at grid point i (j, i broadcast).

    ReflectedGaussianKernel.convolve pads the values v with their mirror images, [flip(v)[:-1], v,
    flip(v)[1:]]: value j sits at j, at -j (if j >= 1) and at 2 (E - 1) - j (if j <= E - 2). Then
    np.convolve(padded, kernel, "valid")[E // 2 + i] weighs a value at position x by kernel[E // 2 + i - x],
    0 where that falls outside the kernel: the kernel is looked up with 2E zeros on each side.
    """
    n_grid = kernel.shape[0]
    last = n_grid - 1
    zeros = np.zeros(2 * n_grid)
    kernel_with_zeros = np.concatenate([zeros, kernel, zeros])  # (5E,): kernel[k] at 2E + k
    centre = 2 * n_grid + n_grid // 2 + i
    weight = kernel_with_zeros[centre - j]
    weight += (j >= 1) * kernel_with_zeros[centre + j]
    weight += (j <= last - 1) * kernel_with_zeros[centre - (2 * last - j)]
    return weight


def interpolation_weights(mesh: np.ndarray, n_grid: int) -> tuple[np.ndarray, np.ndarray]:
    """relplot.kernels.interpolate: mesh point t reads grid points left[t] and left[t] + 1 with
    weights 1 - right_weight[t] and right_weight[t].

    >>> left, right_weight = interpolation_weights(np.array([0.0, 0.3, 1.0]), 5)  # grid 0, 0.25, ..., 1
    >>> left, np.round(right_weight, 4)  # 0.3 lies a fifth of the way from 0.25 to 0.5
    (array([0, 1, 3]), array([0. , 0.2, 1. ]))
    """
    bucket = 1 / (n_grid - 1)
    left = (mesh * (n_grid - 1)).astype(int).clip(0, n_grid - 2)  # (T,)
    right_weight = (mesh - left * bucket) / bucket  # (T,)
    return left, right_weight


def splat_matrix(confidence: np.ndarray, n_grid: int):
    """(N, J) sparse S and touched (J,): smooth_round_to_grid as a matrix, grid values = weights @ S.

    Example n puts 1 - frac[n] on grid point bin[n] and frac[n] on bin[n] + 1. Only the J <= min(2N, E)
    grid points that receive weight get a column; column k is grid point touched[k].

    >>> splat, touched = splat_matrix(np.array([0.1, 0.3]), 5)  # grid 0, 0.25, 0.5, 0.75, 1
    >>> np.round(splat.toarray(), 4), touched  # 0.1 = 0.6 * 0 + 0.4 * 0.25; 0.3 = 0.8 * 0.25 + 0.2 * 0.5
    (array([[0.6, 0.4, 0. ],
           [0. , 0.8, 0.2]]), array([0, 1, 2]))
    """
    from scipy.sparse import csr_matrix  # local: keeps `import peftviz.calibration.smooth_ece` light

    n_examples = confidence.shape[0]
    position = confidence * (n_grid - 1)  # (N,)
    bin_ = position.astype(int).clip(0, n_grid - 2)
    frac = position - bin_
    receives = np.zeros(n_grid, dtype=bool)
    receives[bin_] = receives[bin_ + 1] = True
    touched = np.flatnonzero(receives)  # (J,)
    column_of = np.cumsum(receives) - 1  # (E,): a touched grid point's column
    columns = column_of[np.stack([bin_, bin_ + 1], axis=1)].ravel()  # (2N,): row n's two, ascending
    weights = np.stack([1 - frac, frac], axis=1).ravel()  # (2N,)
    row_starts = np.arange(0, 2 * n_examples + 1, 2)  # (N + 1,): two entries a row
    return csr_matrix((weights, columns, row_starts), shape=(n_examples, touched.shape[0])), touched


def reading_matrix(kernel: np.ndarray, touched: np.ndarray, mesh: np.ndarray) -> np.ndarray:
    """(J, T): what grid value touched[k] adds to the smoothed curve at mesh[t], i.e. relplot's
    reflected convolution, then its linear interpolation between grid points left[t] and left[t] + 1."""
    left, right_weight = interpolation_weights(mesh, kernel.shape[0])  # (T,), (T,)
    at_left = reflected_convolution_weight(kernel, touched[:, None], left)  # (J, T)
    at_right = reflected_convolution_weight(kernel, touched[:, None], left + 1)  # (J, T)
    return (1 - right_weight) * at_left + right_weight * at_right


def smoothing_operator(confidence: np.ndarray, sigma: float, mesh: np.ndarray) -> np.ndarray:
    """(N, T) A = S @ R: A[n, t] is what example n, with weight 1, adds to relplot's smoothed value
    at mesh[t], i.e. ``ReflectedGaussianKernel(sigma).apply(c, w, mesh) = w @ A`` for any weights w (N,).

    >>> from relplot.kernels import ReflectedGaussianKernel
    >>> confidence, weights, mesh = np.array([0.2, 0.7, 0.9]), np.array([1.0, 2.0, 0.5]), np.linspace(0, 1, 11)
    >>> operator = smoothing_operator(confidence, 0.1, mesh)
    >>> operator.shape
    (3, 11)
    >>> bool(np.allclose(weights @ operator, ReflectedGaussianKernel(0.1).apply(confidence, weights, mesh)))
    True
    """
    n_grid = grid_points(sigma)
    splat, touched = splat_matrix(confidence, n_grid)  # (N, J), (J,)
    return splat @ reading_matrix(gaussian_on_grid(sigma, n_grid), touched, mesh)  # (N, T)


# ---------------------------------------------------------------- smooth ECE at fixed bandwidths


def smooth_ece_on_grid(grid_density, grid_residual, touched: np.ndarray, sigma: float, n_grid: int) -> np.ndarray:
    """(G,) smooth ECE at one sigma from the rows' splatted grid values (G, J) on the touched points.

    The mesh goes in pieces so that no work array exceeds _CHUNK_ELEMENTS; the two sums add up."""
    kernel = gaussian_on_grid(sigma, n_grid)  # (E,)
    mesh = np.linspace(0, 1, mesh_points(sigma))  # (T,)
    piece = max(1, _CHUNK_ELEMENTS // max(grid_density.shape[0], touched.shape[0]))
    weighted_sum = np.zeros(grid_density.shape[0])
    density_sum = np.zeros(grid_density.shape[0])
    for start in range(0, mesh.shape[0], piece):
        read = reading_matrix(kernel, touched, mesh[start : start + piece])  # (J, P)
        density = grid_density @ read + DENSITY_FLOOR  # (G, P)
        smoothed_residual = (grid_residual @ read) / density  # (G, P)
        weighted_sum += np.sum(np.abs(smoothed_residual) * density, axis=1)
        density_sum += np.sum(density, axis=1)
    return weighted_sum / density_sum


def smooth_ece_at_each(confidence, residual, counts, sigmas: np.ndarray) -> np.ndarray:
    """(G,) each row's smooth ECE at its own sigma. The splat depends on sigma only through the grid
    size E (1001 points for every sigma >= 0.02), so rows are splatted once per grid size, and the
    reading matrix is built once per distinct sigma."""
    eces = np.empty(sigmas.shape[0])
    distinct, which = np.unique(sigmas, return_inverse=True)
    grid_sizes = np.array([grid_points(float(sigma)) for sigma in distinct])[which]  # (G,)
    for n_grid in np.unique(grid_sizes):
        on_grid = np.flatnonzero(grid_sizes == n_grid)
        splat, touched = splat_matrix(confidence, int(n_grid))  # (N, J), (J,)
        grid_density = np.asarray(counts[on_grid] @ splat)  # (g, J)
        grid_residual = np.asarray((counts[on_grid] * residual) @ splat)  # (g, J)
        for sigma in np.unique(sigmas[on_grid]):
            rows = sigmas[on_grid] == sigma
            eces[on_grid[rows]] = smooth_ece_on_grid(
                grid_density[rows], grid_residual[rows], touched, float(sigma), int(n_grid)
            )
    return eces


# ---------------------------------------------------------------- bandwidth search


def search_bandwidth(confidence, residual, counts) -> tuple[np.ndarray, np.ndarray]:
    """(smECE (G,), sigma (G,)) of every row of counts: relplot's search_param, all rows in step."""
    n_rows = counts.shape[0]
    ece_at_start = smooth_ece_at_each(confidence, residual, counts, np.ones(n_rows))
    searching = ~(1.0 < ece_at_start)  # relplot returns sigma = 1 where its first test holds (never with c in [0, 1])
    start, end = np.ones(n_rows), np.zeros(n_rows)  # the test fails at start, holds at end
    for _ in range(BISECTION_STEPS):
        mid = (start + end) / 2
        computed = searching & (mid >= EPS)
        ece_at_mid = np.zeros(n_rows)
        ece_at_mid[computed] = smooth_ece_at_each(confidence, residual, counts[computed], mid[computed])
        holds = mid < EPS
        holds[computed] = mid[computed] < ece_at_mid[computed]
        end = np.where(searching & holds, mid, end)
        moved = searching & ~holds
        start = np.where(moved, mid, start)
        ece_at_start = np.where(moved, ece_at_mid, ece_at_start)
    return ece_at_start, start


def resampled_smooth_ece(confidence, correct, indices) -> tuple[np.ndarray, np.ndarray]:
    """(smECE (R,), sigma (R,)): row r is ``relplot.smECE(c[indices[r]], h[indices[r]], return_width=True)``.

    confidence (N,) in [0, 1], correct (N,) in {0, 1} (bool or numbers), indices (R, N) integers in [0, N).

    Row 0 is all data: half right at a mean confidence of 0.775. Row 1 holds each right prediction
    twice (confidences 0.95, 0.85, 0.75, 0.65): all right at a mean confidence of 0.8. smECE is
    close to the bandwidth it was found at (smECE_sigma* = sigma*, up to the 2^-10 steps):

    >>> confidence = np.array([0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.65, 0.6])
    >>> correct = np.array([True, False, True, False, True, False, True, False])
    >>> rows = np.array([[0, 1, 2, 3, 4, 5, 6, 7], [0, 0, 2, 2, 4, 4, 6, 6]])
    >>> eces, sigmas = resampled_smooth_ece(confidence, correct, rows)
    >>> np.round(eces, 4), sigmas * 1024
    (array([0.275 , 0.1997]), array([282., 205.]))
    """
    from threadpoolctl import threadpool_limits  # local: scikit-learn's own dependency

    confidence, correct, indices = check_inputs(confidence, correct, indices)
    n_rows, n_examples = indices.shape
    residual = confidence - correct  # (N,)
    rows_per_pass = max(1, _CHUNK_ELEMENTS // n_examples)
    eces, sigmas = [], []
    # One BLAS thread: the products are small, and on a machine whose cores are busy elsewhere
    # OpenBLAS's threads wait on each other (2 cores, both loaded: R = 1000, N = 213 took 3.1 s, not 0.36 s).
    with threadpool_limits(1, "blas"):
        for start in range(0, n_rows, rows_per_pass):
            counts = example_counts(indices[start : start + rows_per_pass], n_examples)  # (G, N)
            ece, sigma = search_bandwidth(confidence, residual, counts)
            eces.append(ece)
            sigmas.append(sigma)
    return np.concatenate(eces), np.concatenate(sigmas)


def example_counts(indices: np.ndarray, n_examples: int) -> np.ndarray:
    """(G, N) float: how many times each row of indices (G, M) holds example i.

    >>> example_counts(np.array([[0, 0, 2], [1, 2, 2]]), 3)
    array([[2., 0., 1.],
           [0., 1., 2.]])
    """
    n_rows = indices.shape[0]
    flat = (np.arange(n_rows)[:, None] * n_examples + indices).ravel()
    return np.bincount(flat, minlength=n_rows * n_examples).reshape(n_rows, n_examples).astype(np.float64)


# ---------------------------------------------------------------- validation


def check_inputs(confidence, correct, indices) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    confidence = np.asarray(confidence, dtype=np.float64)
    if confidence.ndim != 1 or confidence.shape[0] == 0:
        raise ConfigError(f"confidence must have shape (N >= 1,), got shape {confidence.shape}")
    if not np.all((confidence >= 0) & (confidence <= 1)):  # NaN fails too
        raise ConfigError("confidence must lie in [0, 1] (no NaN)")
    correct = np.asarray(correct)
    n_examples = confidence.shape[0]
    if correct.shape != (n_examples,):
        raise ConfigError(f"correct must have shape ({n_examples},) to match confidence, got shape {correct.shape}")
    correct = correct.astype(np.float64)
    if not np.all((correct == 0) | (correct == 1)):
        raise ConfigError("correct must hold only 0 and 1 (or False and True)")
    indices = np.asarray(indices)
    if indices.ndim != 2 or indices.shape[0] < 1 or indices.shape[1] != n_examples:
        raise ConfigError(f"indices must have shape (R >= 1, {n_examples}), got shape {indices.shape}")
    if not np.issubdtype(indices.dtype, np.integer) or indices.min() < 0 or indices.max() >= n_examples:
        raise ConfigError(f"indices must be integers in [0, {n_examples})")
    return confidence, correct, indices.astype(np.int64, copy=False)
