"""The baselines of the papers and the helpers that are not the filter layer.

What the reproductions of ``experiments/`` compare the filters with, and the data and scores they
use. The filter layer (:mod:`jaxrvga.filters`, :mod:`jaxrvga.beliefs`, ...) never imports this
wing; each module registers its own states with :mod:`jaxrvga.io`.

* :mod:`~jaxrvga.baselines.laplace` - the batch Laplace approximation (the R-VGA paper's reference).
* :mod:`~jaxrvga.baselines.klprox` - KL-proximal variational inference (Khan et al.).
* :mod:`~jaxrvga.baselines.dual` - dual variational inference (Khan et al.).
* :mod:`~jaxrvga.baselines.online_em` - recursive EM on a Gaussian mixture (Titterington,
  Cappe & Moulines).
* :mod:`~jaxrvga.baselines.batch_fa` - batch factor analysis of a dense target and its scores (the
  reference of Algorithm 1).
* :mod:`~jaxrvga.baselines.fa_filters` - the factor-analysis filters of the L-RVGA paper's EM
  comparison.
* :mod:`~jaxrvga.baselines.data` - the papers' data generators and data sets.
* :mod:`~jaxrvga.baselines.metrics` - KL divergences, Monte Carlo KL, predictive scores, ECE.
"""
from . import batch_fa, data, dual, fa_filters, klprox, laplace, metrics, online_em

__all__ = ["batch_fa", "data", "dual", "fa_filters", "klprox", "laplace", "metrics", "online_em"]
