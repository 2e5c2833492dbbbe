"""The numerical kernels under the filter layer: plain functions of arrays, no filter state.

* :mod:`~jaxrvga.kernels.lowrank` - the algebra of a precision ``W W^T + diag(psi)``: solves,
  log-determinants, quadratic forms, whitened Grams, exact samples, initial factors
  (``jaxrvga.lowrank`` is this module).
* :mod:`~jaxrvga.kernels.factor_analysis` - the factor-analysis projection of [LRVGA]
  (Algorithm 1, its spectral start, batch EM); ``jaxrvga.factor_analysis`` is this module.
* :mod:`~jaxrvga.kernels.row_blocks` - streaming a d x p factor in row blocks.
* :mod:`~jaxrvga.kernels.root_solvers` - the scalar root solvers of the implicit R-VGA update.
* :mod:`~jaxrvga.kernels.special` - sigmoid, probit and their Gaussian expectations.
"""
import warnings

from . import factor_analysis, lowrank, root_solvers, row_blocks, special

__all__ = ["factor_analysis", "lowrank", "root_solvers", "row_blocks", "special"]


def __getattr__(name):
    """``kernels.woodbury``: a deprecated name of :mod:`~jaxrvga.kernels.lowrank`, served with a
    ``DeprecationWarning`` so that code that imports it keeps running."""
    if name == "woodbury":
        warnings.warn("jaxrvga.kernels.woodbury is now jaxrvga.kernels.lowrank (jr.lowrank)",
                      DeprecationWarning, stacklevel=2)
        return lowrank
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
