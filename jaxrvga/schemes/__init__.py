"""Update schemes of the R-VGA, each written once for every belief (dense, low-rank, diagonal).

A scheme is a value (:class:`~jaxrvga.schemes.base.Scheme`) made by its factory, which validates its
options; :func:`jaxrvga.build` joins it with a belief, a model and the dynamics. A scheme of your own
is one more value. One family a module, on the shared parts of :mod:`~jaxrvga.schemes.base`
(:class:`~jaxrvga.schemes.base.Increment`, the options, :func:`~jaxrvga.schemes.base.absorb`,
:func:`~jaxrvga.schemes.base.limit_move`, :func:`~jaxrvga.schemes.base.iterate`):

* :mod:`~jaxrvga.schemes.conjugate` - ``exact``: the Kalman filter of a linear-Gaussian model ([RVGA]
  Thm 2, eqs. 40-42).
* :mod:`~jaxrvga.schemes.implicit_glm` - ``implicit``: expectations under the new belief, exact for GLMs:
  the 2-D root of the logistic model ([RVGA] eqs. 69-77) or the convex 1-D solve of any log-concave
  GLM; the mean step then uses ``P_{t-1}`` ([RVGA] eq. 76).
* :mod:`~jaxrvga.schemes.moments` - ``explicit``: expectations under the previous belief ([RVGA]
  eqs. 30-31, 78-80); ``extragrad``: mirror prox ([LRVGA] eqs. 139-145), a second evaluation under
  the explicit step's belief (``correction=True`` adds the natural-parameter term
  ``c x x^T (muhat - mu)`` that makes it exact on linear-Gaussian models; the paper's eq. 142 omits it).
* :mod:`~jaxrvga.schemes.linearised` - ``ekf``: linearised at the previous mean, curvature
  ``J^T F J`` ([RVGA] Thm 3, eqs. 54-55, 81); ``moment_ekf``, the EKF of a Gaussian likelihood with
  the output's mean and variance plus a jitter.
* :mod:`~jaxrvga.schemes.quadratic_bound` - ``qkf``: the Jaakkola-Jordan quadratic bound ([RVGA]
  eqs. 82-90), logistic model.
* :mod:`~jaxrvga.schemes.monte_carlo` - ``sampled``: Monte-Carlo expectations for any model
  ``eta = h(theta, x)``: GGN curvature ``E[J^T F J]`` ([LRVGA] eq. 41) or the Hessian, ``num_iters``
  passes of the implicit iteration, each restarting from the previous belief so the observation is
  counted once; ``published_sampled``, the published L-RVGA's form.

:data:`FACTORIES` names the factories that ``jr.rvga(model, scheme="name")`` takes.
"""
# a module is named for its family, a factory for its scheme: no module is shadowed by a factory
from . import base, conjugate, implicit_glm, linearised, moments, monte_carlo, quadratic_bound
from .base import (CURVATURES, MAX_MOVE, Implicit, Increment, Iterated, Limited, Linearised, Scheme, absorb,
                   info_from, iterate, limit_move, temper)
from .conjugate import exact, exact_site
from .implicit_glm import implicit, implicit_site
from .linearised import MOMENT_JITTER, ekf, ekf_glm_site, ekf_site, linearise, moment_ekf, moment_weights
from .moments import explicit, extragrad, moment_site
from .monte_carlo import mean_rows, published_draws, published_sampled, sampled, sampled_site
from .quadratic_bound import qkf, qkf_site

#: The factory of each scheme name of :func:`jaxrvga.rvga`, :func:`jaxrvga.lrvga` and
#: :func:`jaxrvga.diag_rvga` (the module table of :mod:`jaxrvga.filters`).
FACTORIES = {"exact": exact, "implicit": implicit, "explicit": explicit, "extragrad": extragrad, "ekf": ekf,
             "moment_ekf": moment_ekf, "qkf": qkf, "sampled": sampled}

__all__ = ["Scheme", "CURVATURES", "FACTORIES", "exact", "implicit", "explicit", "extragrad", "ekf", "moment_ekf",
           "qkf", "sampled", "published_sampled", "MOMENT_JITTER", "MAX_MOVE", "Increment", "Limited", "Implicit",
           "Linearised", "Iterated", "absorb", "limit_move", "iterate", "temper", "moment_weights", "exact_site",
           "moment_site", "ekf_glm_site", "qkf_site", "implicit_site", "linearise", "ekf_site", "sampled_site",
           "info_from", "mean_rows", "published_draws", "base", "conjugate", "implicit_glm", "linearised",
           "moments", "monte_carlo", "quadratic_bound"]
