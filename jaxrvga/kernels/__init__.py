"""The numerical kernels under the filter layer: plain functions of arrays, no filter state.

* :mod:`~jaxrvga.kernels.woodbury` - the algebra of a precision ``W W^T + diag(psi)``: solves,
  log-determinants, quadratic forms, whitened Grams, exact samples, initial factors (the
  published name ``jaxrvga.lowrank`` is this module).
* :mod:`~jaxrvga.kernels.factor_analysis` - the factor-analysis projection of [LRVGA]
  (Algorithm 1, its spectral start, batch EM); ``jaxrvga.factor_analysis`` is this module.
* :mod:`~jaxrvga.kernels.row_blocks` - streaming a d x p factor in row blocks.
* :mod:`~jaxrvga.kernels.root_solvers` - the scalar root solvers of the implicit R-VGA update.
* :mod:`~jaxrvga.kernels.special` - sigmoid, probit and their Gaussian expectations.
"""
from . import factor_analysis, root_solvers, row_blocks, special, woodbury

__all__ = ["factor_analysis", "root_solvers", "row_blocks", "special", "woodbury"]
