"""Gaussian beliefs ``N(mean, P)``: what every update scheme needs (dense, low-rank, diagonal).

A belief is a small configuration object whose methods act on a state (a NamedTuple pytree):

* :class:`Dense` - full covariance, :class:`~jaxrvga.beliefs.GaussianState` ``(mean, cov)``, O(d^2);
* :class:`LowRank` - precision ``W W^T + diag(psi)``, :class:`~jaxrvga.beliefs.LowRankState`, O(d p);
* :class:`Diagonal` - precision ``diag(psi)`` (mean field), :class:`~jaxrvga.beliefs.DiagonalState`, O(d).

All offer the same operations (the contract :class:`Belief`; :func:`of_state` gives the belief that
reads a state, which is how :mod:`jaxrvga.posterior_predictive` asks it):

* ``predict(state, dynamics)``: the prediction step under :class:`~jaxrvga.dynamics.Dynamics`,
  ``N(gamma mu + (1 - gamma) m, gamma^2 (1 + eta) P + Q)`` (exact for every belief);
* ``marginal(state, X)``: means and variances of ``x_i^T theta`` for the rows of ``X`` (m, d);
* ``sandwich(state, J)``: ``J P J^T``; ``solve(state, g)``: ``P g``;
* ``base_draws(key, num, d, dtype)`` and ``draw(state, draws)``: draws of ``theta`` from base draws in
  antithetic pairs (the sampled schemes: common random numbers across passes);
  ``sample(state, key, num)``: independent exact draws (Monte-Carlo predictions);
* ``add(state, X, c)``: the precision step ``P^{-1} + X diag(c) X^T`` ([RVGA] eq. 29, [LRVGA] eq. 7),
  the mean unchanged; ``absorb(state, X, c, g, prior_gain)``: ``add`` and the mean step
  ``mu + P g`` (with the new ``P``, or the previous one with ``prior_gain``, [RVGA] eq. 76);
  ``finish(state)``: the belief's own projection of the result; ``settle(prior, new, ok)``: ``finish(new)``
  where ``ok``, else ``prior`` (the skip-and-flag guard of every filter); ``checked_fields(state)``:
  the arrays whose finiteness the guard checks (those ``add`` does not certify itself).

For the low-rank belief, ``add`` keeps the sum exactly, as the factors ``[W, X diag(sqrt c)]`` of a
higher rank, so that the mean step that follows uses the unprojected precision (by Woodbury, still
no d x d array; a factor at least d wide by the d x d whitened precision, where Woodbury cancels);
``finish`` projects back to rank p by factor analysis ([LRVGA] eq. 8, Algorithm 1, from the
spectral warm start of :func:`jaxrvga.kernels.factor_analysis.spectral_em_step`).
:class:`Diagonal` keeps only the diagonal of the sum but likewise takes the mean step with the sum
itself (Woodbury through an m x m matrix).
:class:`PublishedLowRank` is the published scheme instead: ``add`` projects at once (Algorithm 1
from ``W_{t-1}``), so the mean step uses the projected precision, and ``finish`` does nothing.
"""
from . import base, dense, diagonal, lowrank, reading
from .base import Belief, add_then_solve, antithetic_normals, finish_or_keep, no_projection, psi_min
from .dense import Dense, GaussianState
from .diagonal import Diagonal, DiagonalState
from .lowrank import LOWRANK_DTYPES, LowRank, LowRankState, PublishedLowRank
from .reading import draws, of_state, sample

__all__ = ["Belief", "Dense", "LowRank", "PublishedLowRank", "Diagonal", "GaussianState", "LowRankState",
           "DiagonalState", "of_state", "sample", "draws", "antithetic_normals", "no_projection", "add_then_solve",
           "finish_or_keep", "psi_min", "LOWRANK_DTYPES", "base", "dense", "diagonal", "lowrank", "reading"]
