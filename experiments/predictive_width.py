"""Predictive width: why the linearised predictive of a low-rank network belief loses to the plug-in,
and a predictive scale chosen by the prequential log score of the training stream.

    python -m experiments.predictive_width [--quick] [--tasks binary,multiclass,diabetes] [--ablations]

Set-up of :mod:`experiments.networks_any_prior` (same data, networks, prior ``N(theta0, v I)``,
``jr.lrvga(model, rank=10)`` with its default scheme ``moment_ekf``, one pass, float32).

For an input ``x`` the linearised predictive takes ``eta = h(theta, x) ~ N(h(mu, x), V)``,
``V = J P J^T``, ``J = dh/dtheta`` at the mean, and with the precision ``W W^T + diag(psi)``
(``D = diag(1 / psi)``, ``M = I_p + W^T D W``)

    V = J D J^T  -  J D W M^{-1} W^T D J^T          (Woodbury)
        "psi part"   "W correction" (the data-informed subspace)

The script measures both terms at the test inputs, how the psi part splits between coordinates
whose ``psi`` is still the prior precision ``1/v`` (no observation moved them) and the others,
and the test NLPD of ``eta ~ N(h(mu, x), tau V)`` for ``tau`` in :data:`TAUS` (``tau = 0`` is the
plug-in ``p(y | theta = mu)``, ``tau = 1`` the library's ``jr.predictive``).

The fix (no validation split): a predictive scale ``tau`` chosen by the prequential log score of
the training stream. For each ``tau`` of the grid the run keeps

    L_tau = sum_t log p_tau(y_t | x_t, q_{t-1}),
    p_tau(y | x, q) = int p(y | eta) N(eta; h(mu, x), tau J P J^T) d eta,

evaluated on the predicted belief ``q_{t-1}`` before each update (a ``jr.prequential`` trace). The
test predictive is the Bayesian mixture over the grid (a uniform prior on ``tau``):

    p(y | x, D) = sum_tau w_tau p_tau(y | x, q_T),    w_tau = exp(L_tau) / sum_tau' exp(L_tau').

``L_tau`` is the log evidence of "the filter's beliefs, read with predictive scale tau" as a
model of the stream (Dawid's prequential principle), so ``w`` is the posterior over ``tau``;
with this many observations it is almost always one-hot (the single best ``tau``).
Extra cost per observation: one Jacobian of the network at the predicted mean, ``J D J^T`` and
``J D W`` (O(k d p)), and the closed-form log predictive for each ``tau`` (O(|grid| k^2)).

Findings of the full run (experiments/results/predictive_width/output.txt):

* ``J P J^T`` is far above the logit scale at the priors that serve the mean: binary v = 0.3, median
  61.6 against ``m^2`` = 32.4; 10-class v = 0.3, 50.3 against 5.4. Its psi part ``J D J^T`` dominates:
  the W correction removes 25-38 % of it (binary), 4-19 % (10-class), 49-69 % (diabetes). The psi part
  comes from coordinates whose precision the data raised only a little: ``psi v`` in (1.01, 2] gives
  53-97 % of it at v <= 0.3, (2, 10] 38-70 % at v = 3; coordinates no observation moved (``psi v ~ 1``)
  give 0-47 %.
* Not only the low rank: the full-rank linearised Laplace posterior at the same mean and prior
  (``--ablations``) is also wider than the test data want (binary v = 0.3: ``J P J^T`` 30.9, NLPD 0.242
  against the plug-in's 0.134; diabetes v = 1: 1.250 against 1.170); 19-60 % of it lies outside the
  span of the training Jacobians. The low rank and the tempered curvature of moment_ekf make the
  filter's ``J P J^T`` 1.5-2.1x the full-rank GGN one (binary; the tempering alone 1.2-1.7x), 1.4-2.5x
  on diabetes (no tempering there: the Gaussian family has a fixed variance). The prior variance that
  makes a good one-pass mean acts as a step size; as a belief about 17k weights it is too broad
  (``v ||J||^2`` = 124 at v = 0.3, binary). ``scheme="ekf"`` and rank 40 / 160 (diabetes) do not fix it.
* The best predictive scale on the test set is 1/1024-1/64 (classification), 1/64-1/4 (diabetes); the
  prequential mixture over tau beats the plug-in at every prior of the three tasks (e.g. binary v = 0.3:
  0.093 against 0.134; 10-class v = 0.3: 0.146 against 0.259; diabetes v = 1: 1.163 against 1.170).

Bernoulli: ``sig(k(v) m)`` (the inverse probit of ``jr.predictive``); categorical: the pairwise
probit ``jr.kernels.special.softmax_probit``; Gaussian: ``N(y; m, v + 0.5)``. The CSV and the printed
output go to experiments/results/predictive_width/, the figures beside it as
``predictive_width_*.png`` (``--quick``: under experiments/results/quick/).
"""
from __future__ import annotations

import argparse
import csv
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxrvga as jr
from experiments.networks_any_prior import NOISE_VAR, PRIORS, RANK, SIZES, initial_state, load, mlp, model_of

#: Predictive scales of the covariance ``J P J^T``; 0 is the plug-in, 1 the linearised predictive.
TAUS = (0.0, 1.0 / 1024, 1.0 / 256, 1.0 / 64, 1.0 / 16, 1.0 / 4, 1.0)
#: Scales ``s`` of the psi part only: the predictive covariance ``J (W W^T + diag(psi) / s)^{-1} J^T``.
PSI_SCALES = (1.0 / 1024, 1.0 / 256, 1.0 / 64, 1.0 / 16, 1.0 / 4, 1.0)
OUT = os.path.join(os.path.dirname(__file__), "results", "predictive_width")


def _figure_path(name):
    """Figures go beside the folder ``OUT``, named ``predictive_width_<name>`` (the report's images are
    flat files of experiments/results)."""
    return os.path.join(os.path.dirname(OUT), "predictive_width_" + name)


# ----------------------------------------------------------------------------------------------
# Pieces of the linearised predictive of a low-rank belief
# ----------------------------------------------------------------------------------------------
def eta_parts(h, state, x, masks=None):
    """``(m, A, B)`` at one input: ``m = h(mu, x)`` (k,), ``A = J D J^T`` (k, k), ``B = J D W`` (k, p);
    with coordinate masks (nb, d) also the diagonal of ``A`` split over them, (k, nb)."""
    def f(theta):
        return jnp.atleast_1d(h(theta, x))

    m = f(state.mean)
    J = jax.jacrev(f)(state.mean)  # (k, d)
    JD = J / state.psi
    out = (m, JD @ J.T, JD @ state.W)
    if masks is not None:
        out = out + ((JD * J) @ masks.T,)
    return out


def chol_m(state):
    """Lower Cholesky factor of ``M = I + W^T D W`` (the state's cached Gram where it has one)."""
    return jr.kernels.lowrank.factorize(state.W, state.psi, state.gram).chol


def correction(L, B):
    """``B M^{-1} B^T`` (..., k, k) from ``L = chol(M)``."""
    Z = jax.scipy.linalg.solve_triangular(L, jnp.swapaxes(B, -1, -2), lower=True)  # (p, k) per input
    return jnp.swapaxes(Z, -1, -2) @ Z


def psi_scaled_cov(A, B, G, s):
    """``J (W W^T + diag(psi) / s)^{-1} J^T = s A - s^2 B (I + s G)^{-1} B^T`` (G = W^T D W)."""
    p = G.shape[0]
    L = jnp.linalg.cholesky(jnp.eye(p, dtype=G.dtype) + s * G)
    return s * A - s * s * correction(L, B)


def log_density(task, y, m, V):
    """``log int p(y | eta) N(eta; m, V) d eta`` per input (closed forms as ``jr.predictive``);
    ``m`` (n, k), ``V`` (n, k, k)."""
    if task == "binary":
        z = jr.kernels.special.probit_k(V[:, 0, 0]) * m[:, 0]
        return jnp.where(y > 0.5, jax.nn.log_sigmoid(z), jax.nn.log_sigmoid(-z))
    if task == "multiclass":
        p, _ = jr.kernels.special.softmax_probit(m, V)
        return jnp.log(jnp.clip(jnp.take_along_axis(p, y[:, None], axis=1)[:, 0], 1e-30, 1.0))
    var = V[:, 0, 0] + NOISE_VAR
    return -0.5 * (jnp.log(2 * jnp.pi * var) + (y - m[:, 0]) ** 2 / var)


def prequential_trace(task, h, taus=TAUS):
    """A ``jr.prequential`` trace: ``log p_tau(y_t | x_t, q_{t-1})`` for each ``tau`` (|taus|,)."""
    taus = jnp.asarray(taus)

    def fn(state, x, y):
        m, A, B = eta_parts(h, state, x)
        V = A - correction(chol_m(state), B)
        ms = jnp.broadcast_to(m, (taus.shape[0],) + m.shape)
        return log_density(task, jnp.broadcast_to(y, taus.shape), ms, taus[:, None, None] * V)

    return jr.prequential(fn)


def test_parts(h, state, Xte, masks, batch=64):
    """``m, A, B, A_split`` at every test input (``lax.map`` in batches: a 10-output Jacobian is k x d)."""
    return jax.lax.map(lambda x: eta_parts(h, state, x, masks), Xte, batch_size=batch)


#: Bins of ``psi * v`` (the precision of a coordinate over the prior's): (0.99, 1.01] is a coordinate no
#: observation moved; below 0.99 the factor analysis took more than the data's diagonal into ``W`` and the
#: coordinate's psi part is wider than the prior; the variance a coordinate keeps is ``v / (psi v)``.
PSI_BINS = (0.0, 0.99, 1.01, 2.0, 10.0, np.inf)


def psi_masks(psi, v):
    r = psi * v
    return jnp.stack([((r > lo) & (r <= hi)).astype(psi.dtype) for lo, hi in zip(PSI_BINS[:-1], PSI_BINS[1:])])


# ----------------------------------------------------------------------------------------------
# One task
# ----------------------------------------------------------------------------------------------
def run_task(task, priors, n_train=None, rank=RANK, scheme=None, dtype=jnp.float32, taus=TAUS, vmap=True):
    """Run the filter over ``priors`` (vmapped) with the prequential trace; return per-prior results."""
    Xtr, ytr, Xte, yte = load(task, dtype)
    if n_train is not None:
        Xtr, ytr = Xtr[:n_train], ytr[:n_train]
    theta0, h = mlp(SIZES[task], dtype)
    model = model_of(task, h)
    flt = jr.lrvga(model, rank=rank, **({} if scheme is None else dict(scheme=scheme)))
    states = [initial_state(flt, theta0, v, False) if rank == RANK else _init(flt, theta0, v, rank)
              for v in priors]
    stacked = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *states)
    trace = prequential_trace(task, h, taus)
    t0 = time.perf_counter()
    if vmap:
        finals, scores = jax.jit(jax.vmap(lambda s: jr.scan(flt, s, Xtr, ytr, trace)))(stacked)
    else:  # one prior at a time (the vmapped run with the trace hung in XLA:CPU at rank 160)
        one = jax.jit(lambda s: jr.scan(flt, s, Xtr, ytr, trace))
        outs = [one(s) for s in states]
        finals, scores = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *outs)
    jax.block_until_ready(finals.mean)
    wall = time.perf_counter() - t0
    rows = []
    for i, v in enumerate(priors):
        st = jax.tree_util.tree_map(lambda a, i=i: a[i], finals)
        rows.append(evaluate_state(task, h, model, st, v, np.asarray(scores[i]), Xte, yte, taus))
    return {"task": task, "d": int(theta0.shape[0]), "T": int(Xtr.shape[0]), "rows": rows, "wall": wall,
            "flt": flt, "h": h, "theta0": theta0, "data": (Xtr, ytr, Xte, yte), "model": model, "finals": finals}


def _init(flt, theta0, v, rank):
    W0, psi0 = jr.lowrank.init_factors(jax.random.PRNGKey(1), theta0.shape[0], rank, prior_var=v)
    return flt.init(theta0, W0.astype(theta0.dtype), psi0.astype(theta0.dtype))


def evaluate_state(task, h, model, st, v, scores, Xte, yte, taus=TAUS):
    """Test NLPD for each tau, for the psi-only scales, for the prequential mixture; variance parts."""
    masks = psi_masks(st.psi, v)
    m, A, B, A_split = test_parts(h, st, Xte, masks)
    L = chol_m(st)
    C = correction(L, B)
    V = A - C
    nlpd_tau = [float(-jnp.mean(log_density(task, yte, m, t * V))) for t in taus]
    G = (L @ L.T) - jnp.eye(L.shape[0], dtype=L.dtype)
    nlpd_psi = [float(-jnp.mean(log_density(task, yte, m, psi_scaled_cov(A, B, G, s)))) for s in PSI_SCALES]
    # the library's own linearised predictive, as a check of tau = 1
    pred = jr.predictive(st, Xte, model=model)
    lib = _nlpd_of_probs(task, np.asarray(pred.mean, np.float64), np.asarray(yte), np.asarray(pred.var))
    # the plug-in with probabilities clipped at 1e-7 (the convention of networks_any_prior's test log-loss)
    plug = np.asarray(model.family.mean(m if task == "multiclass" else m[:, 0]), np.float64)
    plugin_clip = _nlpd_of_probs(task, plug, np.asarray(yte), np.zeros(len(yte)))
    # the fix: Bayesian mixture over tau with weights exp(prequential log score)
    L_tau = np.sum(scores.astype(np.float64), axis=0)  # (|taus|,)
    logw = L_tau - np.logaddexp.reduce(L_tau)
    tail = scores.shape[0] - scores.shape[0] // 5
    L_tail = np.sum(scores[tail:].astype(np.float64), axis=0)
    logw_tail = L_tail - np.logaddexp.reduce(L_tail)
    logp = np.stack([np.asarray(log_density(task, yte, m, t * V), np.float64) for t in taus])  # (|taus|, n)
    mix = -np.mean(np.logaddexp.reduce(logw[:, None] + logp, axis=0))
    mix_tail = -np.mean(np.logaddexp.reduce(logw_tail[:, None] + logp, axis=0))
    best = int(np.argmax(L_tau))
    diag = lambda a: np.asarray(jnp.diagonal(a, axis1=-2, axis2=-1), np.float64).ravel()  # noqa: E731
    return {"prior": v, "nlpd_tau": nlpd_tau, "nlpd_psi": nlpd_psi, "lib": lib, "plugin_clip": plugin_clip,
            "mix": float(mix), "mix_tail": float(mix_tail),
            "preq_tau": L_tau / scores.shape[0], "preq_tail": np.mean(scores[tail:], axis=0), "weights": np.exp(logw),
            "best_tau": taus[best], "nlpd_best": nlpd_tau[best], "test_logp": logp, "logw": logw,
            "cum": np.cumsum(scores.astype(np.float64) - scores[:, :1], axis=0),
            "A": diag(A), "C": diag(C), "V": diag(V), "m2": np.asarray(m, np.float64).ravel() ** 2,
            "A_split": np.asarray(A_split, np.float64).reshape(-1, masks.shape[0]),
            "psi_frac": np.asarray(jnp.mean(masks, axis=1), np.float64),
            "finite": bool(np.all(np.isfinite(np.asarray(st.mean))))}


def _nlpd_of_probs(task, mean, y, var):
    if task == "binary":
        p = np.clip(mean, 1e-7, 1 - 1e-7)
        return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))
    if task == "multiclass":
        return float(-np.mean(np.log(np.clip(mean[np.arange(len(y)), y], 1e-7, 1.0))))
    s2 = var + NOISE_VAR
    return float(np.mean(0.5 * np.log(2 * np.pi * s2) + (y - mean) ** 2 / (2 * s2)))


# ----------------------------------------------------------------------------------------------
# Ablations
# ----------------------------------------------------------------------------------------------
def full_ggn_reference(task, h, st, v, Xtr, Xte, yte, taus=TAUS, tempered=False):
    """Test NLPD per tau of the full-rank linearised Laplace posterior at the filter's final mean:
    ``P = (I / v + sum_t J_t^T c_t J_t)^{-1}`` over all the training inputs at once (GGN curvature
    ``c = p (1 - p)`` or ``1 / s2``; ``tempered``: the curvature moment_ekf uses, ``c V / (V + jitter)``).
    Scalar outputs only; by Woodbury in the N-dimensional data space, float64. Returns
    ``(nlpd per tau, medians over the test inputs of J P J^T, v ||J_perp||^2, v ||J||^2 and v ||J_perp||^2 / J P J^T)``."""
    f = lambda th, x: h(th, x)  # noqa: E731
    parts = lambda x: (f(st.mean, x), jax.grad(f)(st.mean, x))  # noqa: E731
    m_tr, J_tr = (np.asarray(a, np.float64) for a in jax.lax.map(parts, Xtr, batch_size=64))
    m_te, J_te = (np.asarray(a, np.float64) for a in jax.lax.map(parts, Xte, batch_size=64))
    jitter = jr.schemes.MOMENT_JITTER
    if task == "binary":
        p = 1.0 / (1.0 + np.exp(-m_tr))
        c = p * (1 - p)
        c = c * c / (c + jitter) if tempered else c
    else:
        c = np.full_like(m_tr, 1.0 / (NOISE_VAR + jitter) if tempered else 1.0 / NOISE_VAR)
    s = np.sqrt(c)
    Ks = (J_tr @ J_tr.T) * s[:, None] * s[None, :]
    Xs = (J_te @ J_tr.T) * s[None, :]
    Lc = np.linalg.cholesky(np.eye(len(s)) + v * Ks)
    Z = np.linalg.solve(Lc, Xs.T)  # (N, n)
    norm2 = np.sum(J_te * J_te, axis=1)
    V = v * norm2 - v * v * np.sum(Z * Z, axis=0)
    # the part of J_te outside the span of the training Jacobians, where the posterior is the prior:
    # ||J_perp||^2 = ||J||^2 - x^T K^+ x, x = J_tr J_te (K = J_tr J_tr^T, pseudo-inverse by eigh)
    lam, U = np.linalg.eigh(J_tr @ J_tr.T)
    keep = lam > lam.max() * 1e-10
    proj = ((J_te @ J_tr.T) @ U[:, keep]) / np.sqrt(lam[keep])
    perp = np.maximum(norm2 - np.sum(proj * proj, axis=1), 0.0)
    m, y = jnp.asarray(m_te[:, None]), jnp.asarray(yte)
    nlpd = [float(-jnp.mean(log_density(task, y, m, jnp.asarray(t * V)[:, None, None]))) for t in taus]
    return nlpd, {"V": float(np.median(V)), "perp": float(np.median(v * perp)), "prior": float(np.median(v * norm2)),
                  "perp_share": float(np.median(v * perp / V))}


def timing(task, priors_one, n_train=None, repeats=3):
    """Seconds per observation of one pass at one prior: the filter alone, and with the tau trace."""
    Xtr, ytr, _, _ = load(task, jnp.float32)
    if n_train is not None:
        Xtr, ytr = Xtr[:n_train], ytr[:n_train]
    theta0, h = mlp(SIZES[task], jnp.float32)
    flt = jr.lrvga(model_of(task, h), rank=RANK)
    state = initial_state(flt, theta0, priors_one, False)
    trace = prequential_trace(task, h)
    plain = jax.jit(lambda s: jr.scan(flt, s, Xtr, ytr)[0].mean)
    traced = jax.jit(lambda s: jr.scan(flt, s, Xtr, ytr, trace))
    out = {}
    for name, fn in (("filter", plain), ("filter + tau trace", traced)):
        jax.block_until_ready(fn(state))  # compile
        best = np.inf
        for _ in range(repeats):
            t0 = time.perf_counter()
            jax.block_until_ready(fn(state))
            best = min(best, time.perf_counter() - t0)
        out[name] = best / Xtr.shape[0]
    return out


# ----------------------------------------------------------------------------------------------
# Report
# ----------------------------------------------------------------------------------------------
def _tau_name(t):
    return "0" if t == 0 else ("1" if t == 1 else f"1/{round(1 / t)}")


def joint_choice(res, taus=TAUS):
    """The prior chosen as networks_any_prior chooses it (plug-in prequential score of the last 20 %)
    and the Bayesian mixture over (v, tau) weighted by exp(L_{v, tau}), whole stream."""
    rows = [r for r in res["rows"] if r["finite"]]
    chosen = max(rows, key=lambda r: r["preq_tail"][0])
    L = np.concatenate([r["preq_tau"] * res["T"] for r in rows])
    logw = L - np.logaddexp.reduce(L)
    logp = np.concatenate([r["test_logp"] for r in rows])
    mix = -np.mean(np.logaddexp.reduce(logw[:, None] + logp, axis=0))
    top = int(np.argmax(L))
    return {"chosen_prior": chosen["prior"], "plugin": chosen["nlpd_tau"][0], "linearised": chosen["nlpd_tau"][-1],
            "mix": float(mix), "top": (rows[top // len(taus)]["prior"], taus[top % len(taus)]),
            "top_w": float(np.exp(logw[top]))}


def print_task(res, taus=TAUS):
    task = res["task"]
    print(f"\n## {task} (d = {res['d']}, T = {res['T']} training observations, rank {RANK}, moment_ekf), test NLPD")
    print("| prior v | plug-in (tau 0) [clipped at 1e-7] | linearised (tau 1, jr.predictive) | fix: prequential mixture "
          "| prequential weights "
          "| single best prequential tau | mixture, last 20 % only "
          + "".join(f"| tau {_tau_name(t)} " for t in taus) + "| psi-only scale best |")
    print("|---" * (7 + len(taus) + 1) + "|")
    for r in res["rows"]:
        w = ", ".join(f"{_tau_name(t)}: {x:.2f}" for t, x in zip(taus, r["weights"]) if x >= 0.005)
        bs = int(np.argmin(r["nlpd_psi"]))
        print(f"| {r['prior']} | {r['nlpd_tau'][0]:.3f} [{r['plugin_clip']:.3f}] | {r['nlpd_tau'][-1]:.3f} "
              f"(lib {r['lib']:.3f}) | **{r['mix']:.3f}** | {w} "
              f"| {r['nlpd_best']:.3f} (tau {_tau_name(r['best_tau'])}) | {r['mix_tail']:.3f} "
              + "".join(f"| {x:.3f} " for x in r["nlpd_tau"])
              + f"| {r['nlpd_psi'][bs]:.3f} (s = {_tau_name(PSI_SCALES[bs])}) |")
    j = joint_choice(res, taus)
    print(f"Chosen prior (plug-in prequential score, last 20 %): v = {j['chosen_prior']}: plug-in {j['plugin']:.3f}, "
          f"linearised {j['linearised']:.3f}; mixture over (v, tau) by the whole stream's prequential score: "
          f"{j['mix']:.3f} (top weight {j['top_w']:.2f} on v = {j['top'][0]}, tau = {_tau_name(j['top'][1])})")
    print(f"\n{task}: parts of the predictive variance at the test inputs (medians over test inputs and outputs)")
    print("| prior v | m^2 (logit scale) | J D J^T (psi part) | J D W M^-1 W^T D J^T (W correction) | J P J^T | "
          "correction / psi part | share of psi part from coords with psi v in "
          "(0,0.99] / (0.99,1.01] / (1.01,2] / (2,10] / >10 | "
          "fraction of coords in those bins |")
    print("|---" * 8 + "|")
    for r in res["rows"]:
        share = np.sum(r["A_split"], axis=0) / np.sum(r["A_split"])
        print(f"| {r['prior']} | {np.median(r['m2']):.3g} | {np.median(r['A']):.3g} | {np.median(r['C']):.3g} | "
              f"{np.median(r['V']):.3g} | {np.median(r['C'] / r['A']):.2f} | "
              + " / ".join(f"{x:.2f}" for x in share) + " | " + " / ".join(f"{x:.2f}" for x in r["psi_frac"]) + " |")
    return j


def figures(results, taus=TAUS):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(OUT, exist_ok=True)
    n = len(results)
    # 1. NLPD against the prior
    fig, axes = plt.subplots(1, n, figsize=(4.5 * n, 3.6), squeeze=False)
    for ax, res in zip(axes[0], results):
        v = [r["prior"] for r in res["rows"]]
        ax.plot(v, [r["nlpd_tau"][0] for r in res["rows"]], "o-", label="plug-in (tau = 0)")
        ax.plot(v, [r["nlpd_tau"][-1] for r in res["rows"]], "s-", label="linearised (tau = 1)")
        ax.plot(v, [r["mix"] for r in res["rows"]], "^-", label="prequential mixture over tau")
        ax.plot(v, [min(r["nlpd_tau"]) for r in res["rows"]], "k:", label="best tau on the test set")
        ax.set_xscale("log"), ax.set_xlabel("prior variance v"), ax.set_ylabel("test NLPD"), ax.set_title(res["task"])
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout(), fig.savefig(_figure_path("nlpd_vs_prior.png"), dpi=120), plt.close(fig)
    # 2. NLPD against tau
    x = [t if t > 0 else taus[1] / 4 for t in taus]
    fig, axes = plt.subplots(1, n, figsize=(4.5 * n, 3.6), squeeze=False)
    for ax, res in zip(axes[0], results):
        for r in res["rows"]:
            line, = ax.plot(x, r["nlpd_tau"], "o-", label=f"v = {r['prior']}")
            b = taus.index(r["best_tau"])
            ax.plot(x[b], r["nlpd_tau"][b], "*", ms=14, color=line.get_color(), mec="k")
        ax.set_xscale("log"), ax.set_xticks(x), ax.set_xticklabels([_tau_name(t) for t in taus], fontsize=7)
        ax.set_xlabel("predictive scale tau (star: prequential choice)"), ax.set_ylabel("test NLPD")
        ax.set_title(res["task"])
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout(), fig.savefig(_figure_path("nlpd_vs_tau.png"), dpi=120), plt.close(fig)
    # 3. variance parts against the prior
    fig, axes = plt.subplots(1, n, figsize=(4.5 * n, 3.6), squeeze=False)
    for ax, res in zip(axes[0], results):
        v = [r["prior"] for r in res["rows"]]
        for key, label in (("A", "J D J^T (psi part)"), ("C", "W correction"), ("V", "J P J^T"), ("m2", "m^2 (logit^2)")):
            q = np.array([np.percentile(r[key], [25, 50, 75]) for r in res["rows"]])
            line, = ax.plot(v, q[:, 1], "o-", label=label)
            ax.fill_between(v, q[:, 0], q[:, 2], color=line.get_color(), alpha=0.15)
        ax.set_xscale("log"), ax.set_yscale("log"), ax.set_xlabel("prior variance v"), ax.set_title(res["task"])
        ax.set_ylabel("median (25-75 %) over test inputs")
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout(), fig.savefig(_figure_path("variance_parts.png"), dpi=120), plt.close(fig)
    # 4. cumulative prequential log score against the plug-in's, one prior per task
    fig, axes = plt.subplots(1, n, figsize=(4.5 * n, 3.6), squeeze=False)
    for ax, res in zip(axes[0], results):
        r = res["rows"][len(res["rows"]) // 2]
        for j, t in enumerate(taus):
            ax.plot(r["cum"][:, j], label=f"tau = {_tau_name(t)}")
        ax.set_xlabel("training step t"), ax.set_ylabel("L_tau(t) - L_0(t)")
        ax.set_title(f"{res['task']}, v = {r['prior']}")
        ax.set_ylim(max(np.min(r["cum"][-1]) * 1.2, -60), max(5.0, np.max(r["cum"]) * 1.2))
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout(), fig.savefig(_figure_path("prequential_cumulative.png"), dpi=120), plt.close(fig)


def write_csv(results, taus=TAUS):
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "nlpd.csv"), "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["task", "prior", "plugin", "linearised", "mixture", "best_prequential_tau"]
                   + [f"tau_{_tau_name(t)}" for t in taus]
                   + ["median_m2", "median_psi_part", "median_W_correction", "median_JPJ"])
        for res in results:
            for r in res["rows"]:
                w.writerow([res["task"], r["prior"], f"{r['nlpd_tau'][0]:.4f}", f"{r['nlpd_tau'][-1]:.4f}",
                            f"{r['mix']:.4f}",
                            _tau_name(r["best_tau"])] + [f"{x:.4f}" for x in r["nlpd_tau"]]
                           + [f"{np.median(r[k]):.4g}" for k in ("m2", "A", "C", "V")])


def _ablation_line(r):
    return (f"  v = {r['prior']}: {r['nlpd_tau'][0]:.3f} / {r['nlpd_tau'][-1]:.3f} / {r['mix']:.3f}; "
            f"median psi part {np.median(r['A']):.3g}, W correction {np.median(r['C']):.3g}, "
            f"J P J^T {np.median(r['V']):.3g}; best test tau {_tau_name(TAUS[int(np.argmin(r['nlpd_tau']))])}, "
            f"prequential {_tau_name(r['best_tau'])}")


def ablations(results, priors, n_train, tasks):
    """Scheme ekf against moment_ekf, rank on the diabetes net, and the full-rank GGN reference."""
    print("\n## Ablations (test NLPD: plug-in / linearised tau 1 / prequential mixture; median J P J^T)")
    for task in [t for t in tasks if t != "diabetes"]:  # moment_ekf is the ekf on a Gaussian output (no jitter)
        res = run_task(task, priors, n_train, scheme="ekf")
        print(f"\n{task}, scheme='ekf' (no tempering, jitter 0):")
        for r in res["rows"]:
            print(_ablation_line(r))
    if "diabetes" in tasks:
        for rank in (40, 160):
            res = run_task("diabetes", priors, n_train, rank=rank, vmap=False)
            print(f"\ndiabetes, rank {rank}:")
            for r in res["rows"]:
                print(_ablation_line(r))
    refs = {}
    for res in results:
        if res["task"] == "multiclass":
            continue
        Xtr, _, Xte, yte = res["data"]
        print(f"\n{res['task']}: full-rank linearised Laplace at the filter's final mean (all {res['T']} training inputs, "
              "prior v I), NLPD per tau " + " / ".join(_tau_name(t) for t in TAUS))
        for i, r in enumerate(res["rows"]):
            st = jax.tree_util.tree_map(lambda a, i=i: a[i], res["finals"])
            for tempered in ((False, True) if res["task"] == "binary" else (False,)):
                nl, q = full_ggn_reference(res["task"], res["h"], st, r["prior"], Xtr, Xte, yte, tempered=tempered)
                refs.setdefault((res["task"], tempered), []).append((r, nl, q))
                print(f"  v = {r['prior']}{' (moment_ekf curvature)' if tempered else ' (GGN)':24s}: "
                      + " / ".join(f"{x:.3f}" for x in nl)
                      + f"; median J P J^T {q['V']:.3g} (low-rank: {np.median(r['V']):.3g}), "
                      f"prior v ||J||^2 {q['prior']:.3g}, "
                      f"outside the training Jacobians' span v ||J_perp||^2 {q['perp']:.3g} "
                      f"(median share of J P J^T {q['perp_share']:.2f})")
    if refs:
        reference_figure(refs)


def reference_figure(refs):
    """Low-rank against full-rank linearised posteriors at the same mean: variances and test NLPD against v."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = sorted({t for t, _ in refs})
    fig, axes = plt.subplots(2, len(tasks), figsize=(5 * len(tasks), 7), squeeze=False)
    for j, task in enumerate(tasks):
        ggn = refs[(task, False)]
        v = [r["prior"] for r, _, _ in ggn]
        ax = axes[0, j]
        ax.plot(v, [np.median(r["V"]) for r, _, _ in ggn], "o-", label="J P J^T, low-rank (rank 10)")
        ax.plot(v, [q["V"] for _, _, q in ggn], "s-", label="J P J^T, full-rank GGN posterior")
        if (task, True) in refs:
            ax.plot(v, [q["V"] for _, _, q in refs[(task, True)]], "s--", label="full-rank, moment_ekf curvature")
        ax.plot(v, [q["perp"] for _, _, q in ggn], "^-", label="v ||J_perp||^2 (outside span of training J)")
        ax.plot(v, [q["prior"] for _, _, q in ggn], "k:", label="prior v ||J||^2")
        ax.plot(v, [np.median(r["m2"]) for r, _, _ in ggn], "x-", label="m^2")
        ax.set_xscale("log"), ax.set_yscale("log"), ax.set_xlabel("prior variance v")
        ax.set_title(f"{task}: medians over test inputs")
        ax.legend(fontsize=7)
        ax = axes[1, j]
        ax.plot(v, [r["nlpd_tau"][0] for r, _, _ in ggn], "o-", label="plug-in")
        ax.plot(v, [r["nlpd_tau"][-1] for r, _, _ in ggn], "s-", label="low-rank linearised (tau 1)")
        ax.plot(v, [nl[-1] for _, nl, _ in ggn], "s--", label="full-rank GGN linearised (tau 1)")
        ax.plot(v, [min(nl) for _, nl, _ in ggn], "k:", label="full-rank GGN, best tau on test")
        ax.plot(v, [r["mix"] for r, _, _ in ggn], "^-", label="low-rank, prequential mixture (fix)")
        ax.set_xscale("log"), ax.set_xlabel("prior variance v"), ax.set_ylabel("test NLPD"), ax.legend(fontsize=7)
    fig.tight_layout(), fig.savefig(_figure_path("full_rank_reference.png"), dpi=120), plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="300 training observations, priors 0.1 and 1")
    parser.add_argument("--tasks", default="binary,multiclass,diabetes")
    parser.add_argument("--priors", default=None, help="comma-separated prior variances (default: networks_any_prior's)")
    parser.add_argument("--ablations", action="store_true", help="scheme ekf, ranks 40/160 (diabetes), full-rank reference")
    parser.add_argument("--no-timing", action="store_true")
    args = parser.parse_args(argv)
    global OUT
    if args.quick:  # not to overwrite the full run's figures (experiments/results/quick/ is ignored by git)
        OUT = os.path.join(os.path.dirname(__file__), "results", "quick", "predictive_width")
    priors = tuple(float(v) for v in args.priors.split(",")) if args.priors else ((0.1, 1.0) if args.quick else PRIORS)
    n_train = 300 if args.quick else None
    tasks = args.tasks.split(",")
    print(f"# predictive width: low-rank (rank {RANK}) beliefs, float32, priors {priors}"
          + (", quick: first 300 training observations" if args.quick else ""))
    results = []
    for task in tasks:
        t0 = time.perf_counter()
        results.append(run_task(task, priors, n_train))
        print_task(results[-1])
        print(f"({task}: {time.perf_counter() - t0:.0f} s with compilation)")
    write_csv(results)
    figures(results)
    if not args.no_timing:
        print("\n## Cost per observation (one prior, v = 0.1, compile excluded, best of 3)")
        print("| task | filter | filter + prequential tau trace | extra |")
        print("|---|---|---|---|")
        for task in tasks:
            t = timing(task, 0.1, n_train)
            a, b = t["filter"], t["filter + tau trace"]
            print(f"| {task} | {a * 1e6:.0f} us | {b * 1e6:.0f} us | {100 * (b / a - 1):+.0f} % |")
    if args.ablations:
        ablations(results, priors, n_train, tasks)
    print(f"\nfigures and nlpd.csv in {OUT}")
    return results


if __name__ == "__main__":
    main()
