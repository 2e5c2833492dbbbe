"""Uncertainty with nothing to tune: the library's averaged predictives, no validation split.

    python -m experiments.tuning_free [--quick] [--tasks binary,multiclass,diabetes,linear] [--json FILE]
    python -m experiments.tuning_free --passes 1,2,3 --seeds 10 --tasks binary,multiclass,diabetes

The three network tasks of :mod:`experiments.networks_any_prior` (same data, splits, networks,
rank 10, default scheme ``moment_ekf``, float32, one pass, one observation per update) and a
linear regression with an unknown noise variance. Nothing is chosen on a validation split:

* the prior variance is averaged over the fixed grid :data:`PRIORS` (the grid of
  ``networks_any_prior``; :data:`LINEAR_PRIORS` for the linear task) by ``jr.model_average``,
  each member weighted by its evidence;
* each member is read through the default forecasters ``jr.average.PREDICTIVE_SCALES`` (its
  covariance times 0, the plug-in, ... 1, its linearised predictive), weighted by their
  prequential scores (experiments/REPORT.md, "Uncertainty with nothing to tune");
* the regressions learn their noise variance (``jr.models.gaussian(None)``, ``jr.kalman(None)``)
  from the default prior ``noise=(1, 1)``.

Three averages are run: the grid x scales, one prior x scales (:data:`ONE_PRIOR`) and that prior learned
on the stream (a network's with the forecasters' weights forgetting, ``forget=jr.average.FORGET``). The
documented default (:data:`DEFAULT_RECIPE`) is the prior learned per layer for the
networks and the grid for the linear task, whose prior scale depends on the data's units. Reported per task:
each average's test NLPD (``jr.log_predictive`` of its state); the best validation-tuned plug-in of any
method measured side by side with rebayes, the BONG filters and Adam (:data:`TARGETS`); the library's
own members read alone, each prior with its plug-in and its linearised predictive (the best of them
chosen on the test set: an oracle no method has); and the time per observation of each average against
one filter (the member at prior 0.1) and against optax Adam (batch 1, learning rate 1e-3), in one
process.

The linear task: ``d = 20``, ``theta ~ N(0, I)``, ``x ~ N(0, I)``, noise standard deviation 0.5
(unknown to the filter), 300 training and 5000 test points; its reference is the exact
Bayesian predictive with the true prior and noise variance.
"""
from __future__ import annotations

import argparse
import functools
import json
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.machine import best_time
from experiments.common import results_dir
from jaxrvga.average import LEARN_PRIOR

PRIORS = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0)
LINEAR_PRIORS = tuple(10.0 ** np.arange(-3.0, 2.5, 0.5))
RANK = 10
#: The best validation-tuned plug-in test NLPD of any method (the optax Adam, rebayes and BONG
#: comparison of experiments/REPORT.md, "Networks from any prior": binary prior 0.3, 10 classes
#: prior 0.1, diabetes with minibatches of 16).
TARGETS = {"binary": 0.102, "multiclass": 0.159, "diabetes": 1.080}
TASKS = ("binary", "multiclass", "diabetes", "diabetes-noise-0.5", "linear")
#: The prior of the one-member average read through the scales (index into the grid); the learned prior
#: starts from it, with the hyper-prior variance ``jr.average.LEARN_PRIOR``.
ONE_PRIOR = {"linear": 6}  # LINEAR_PRIORS[6] = 1; the networks: PRIORS[2] = 0.1
#: The documented default of each task (the networks: ``"learned_prior"``, one prior precision per layer
#: learned on the stream from the variance 0.1 around LeCun-normal initial weights, the forecasters'
#: weights forgetting at ``jr.average.FORGET``: better than or level
#: with the fixed prior over ten seeds, its ECE below the plug-in's, at under 2x one filter;
#: experiments/REPORT.md, "The per-layer prior as the default"): the linear task keeps the grid, since a
#: linear model's prior scale is that of its data's units.
DEFAULT_RECIPE = {"linear": "grid"}


def _subset(data, n_train, n_test):
    Xtr, ytr, Xte, yte = data
    return Xtr[:n_train], ytr[:n_train], Xte[:n_test], yte[:n_test]


def network_task(task, quick, seed=0):
    """``(model, flt, members, data, theta0)`` of a network task: the low-rank filter and its members
    over :data:`PRIORS` (the diabetes output learns its noise variance). ``seed`` > 0: other initial
    weights (key ``seed``) and the training stream in another order (the same split)."""
    import jaxrvga as jr
    from experiments.networks_any_prior import initial_state, load, mlp

    dtype = jnp.float32
    known = task == "diabetes-noise-0.5"
    task = "diabetes" if known else task
    data = load(task, dtype)
    if quick:
        data = _subset(data, 120, 60)
    if seed:
        order = np.random.default_rng(seed).permutation(data[0].shape[0])
        data = (data[0][order], data[1][order], *data[2:])
    theta0, h = mlp(mlp_sizes(task, quick), dtype, seed)
    family = {"binary": jr.models.bernoulli(), "multiclass": jr.models.categorical(10),
              "diabetes": jr.models.gaussian(0.5 if known else None)}[task]
    model = jr.models.nonlinear(h, family)
    flt = jr.lrvga(model, rank=RANK)
    states = [initial_state(flt, theta0, v, False) for v in PRIORS]
    members = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *states)
    return model, flt, members, data, theta0, h


def linear_task(quick):
    """The linear regression of the module docstring, and its members over :data:`LINEAR_PRIORS`."""
    import jaxrvga as jr

    d, n_train, n_test = 20, (60 if quick else 300), (500 if quick else 5000)
    rng = np.random.default_rng(0)
    theta = rng.normal(size=d)
    X = rng.normal(size=(n_train + n_test, d))
    y = X @ theta + 0.5 * rng.normal(size=n_train + n_test)
    cast = lambda a: jnp.asarray(a, jnp.float32)  # noqa: E731
    data = (cast(X[:n_train]), cast(y[:n_train]), cast(X[n_train:]), cast(y[n_train:]))
    flt = jr.kalman(None)
    members = jax.vmap(lambda v: flt.init(jnp.zeros(d, jnp.float32), v * jnp.eye(d, dtype=jnp.float32)))(
        jnp.asarray(LINEAR_PRIORS, jnp.float32))
    return jr.models.linear_gaussian(None), flt, members, data


def test_nlpd(state, model, Xte, yte, scale=1.0):
    """Mean negative log predictive density of the test points (``lax.map`` in batches of 32)."""
    return float(_nlpd(state, Xte, yte, model, scale))


@functools.partial(jax.jit, static_argnums=(3, 4))
def _nlpd(state, Xte, yte, model, scale):
    """:func:`test_nlpd`, compiled once per model, scale and state shape (the members share it)."""
    import jaxrvga as jr

    lp = jax.lax.map(lambda xy: jr.log_predictive(state, xy[0], xy[1], model, scale=scale), (Xte, yte),
                     batch_size=32)
    return -jnp.mean(lp)


def member_nlpds(members, model, Xte, yte):
    """``{prior index: (plug-in NLPD, linearised NLPD)}`` of each member read alone."""
    out = []
    for k in range(jax.tree_util.tree_leaves(members)[0].shape[0]):
        member = jax.tree_util.tree_map(lambda a, k=k: a[k], members)
        out.append((test_nlpd(member, model, Xte, yte, 0.0), test_nlpd(member, model, Xte, yte, 1.0)))
    return out


def seconds_per_observation(flt, state, data):
    """Seconds per training observation of one jitted pass of ``flt`` from ``state`` (best of 3); the
    whole final state is returned, so that XLA drops none of the pass."""
    import jaxrvga as jr

    Xtr, ytr = data[0], data[1]
    run = jax.jit(lambda s: jr.scan(flt, s, Xtr, ytr, None)[0])
    return best_time(run, state) / Xtr.shape[0]


def costs(states, data, h, theta0, task):
    """Seconds per observation of each filter of ``states`` (``{name: (filter, initial state)}``, among
    them ``"one_filter"``, a member alone) and of optax Adam."""
    out = {"seconds_" + name: seconds_per_observation(flt, state, data) for name, (flt, state) in states.items()}
    if h is not None:
        from experiments.networks_any_prior import adam_time
        out["seconds_adam"] = adam_time(task.split("-")[0], h, theta0, data[0], data[1])
    return out


def predictive_costs(states, model, Xte, yte):
    """``{"predictive_seconds_" + name: seconds}``: the time per test point of the log predictive
    (:func:`test_nlpd`'s program, best of 3) of each state of ``states`` (``{name: state}``)."""
    return {f"predictive_seconds_{name}": best_time(lambda s: _nlpd(s, Xte, yte, model, 1.0), s) / Xte.shape[0]
            for name, s in states.items()}


class TaskFit(NamedTuple):
    """A task's passes (:func:`fit_task`): its model, filter, members (one per prior of ``priors``),
    ``data`` ``(Xtr, ytr, Xte, yte)``, initial weights ``theta0`` and network ``h`` (None for the linear
    task), the index ``k`` of the one prior, and ``runs``, ``{name: (filter, initial state, final state)}``."""

    model: object
    flt: object
    members: object
    data: tuple
    theta0: object
    h: object
    priors: tuple
    k: int
    runs: dict


def fit_task(task, quick=False, seed=0) -> TaskFit:
    """One pass of each filter of a task: the ``runs`` of :class:`TaskFit` are the ``"average"`` (the prior
    grid x scales), the ``"one_prior_average"`` (member ``k`` x scales) and the ``"learned_prior"`` (one
    precision per layer of a network, ``forget=FORGET``); ``seed`` as :func:`network_task`'s (the linear
    task has one)."""
    import jaxrvga as jr

    if task == "linear":
        model, flt, members, data = linear_task(quick)
        h = theta0 = None
        priors = LINEAR_PRIORS
    else:
        model, flt, members, data, theta0, h = network_task(task, quick, seed)
        priors = PRIORS
    k = ONE_PRIOR.get(task, 2)
    one = jax.tree_util.tree_map(lambda a: a[k:k + 1], members)
    avg = jr.model_average(flt)
    starts = {"average": (avg, avg.init(members)), "one_prior_average": (avg, avg.init(one)),
              "learned_prior": learned_average(flt, task, members, k, priors[k], quick)}
    runs = {name: (f, s0, jr.run(f, s0, data[0], data[1])[0]) for name, (f, s0) in starts.items()}
    return TaskFit(model, flt, members, data, theta0, h, priors, k, runs)


def learned_average(flt, task, members, k, prior_var, quick=False):
    """``(avg, state)``: the learned-prior average of ``flt`` over member ``k`` of ``members`` (built from
    ``prior_var``): for a network the recipe (``jr.average.recipe``: one prior precision per layer, the
    forecasters' weights forgetting at ``FORGET``); one precision, no forgetting, for the linear task."""
    import jaxrvga as jr

    if task != "linear":
        member = jax.tree_util.tree_map(lambda a: a[k], members)
        return jr.average.recipe(flt, member, prior_var, layer_sizes(mlp_sizes(task, quick)))
    avg = jr.model_average(flt, learn_prior=LEARN_PRIOR)
    return avg, avg.init(jax.tree_util.tree_map(lambda a: a[k:k + 1], members), prior_precision=1.0 / prior_var)


def passes_rows(task, quick=False, seeds=1, passes=(1, 2, 3)):
    """Test NLPD of a network task's recipe (the ``"learned_prior"`` average, from prior variance 0.1) after
    E passes over the training stream with the likelihood tempered to ``1 / E`` (``jr.models.tempered``),
    for each E of ``passes``, over ``seeds`` (:func:`network_task`); E = 1 is the recipe itself."""
    import jaxrvga as jr

    rows, k = [], PRIORS.index(0.1)
    for seed in range(seeds):
        model, _, members, data, _, _ = network_task(task, quick, seed)
        for E in passes:
            avg, state = learned_average(jr.lrvga(jr.models.tempered(model, 1.0 / E), rank=RANK), task, members, k,
                                         PRIORS[k], quick)
            state = jr.passes(avg, state, data[0], data[1])  # E = 1 / power
            rows.append({"task": task, "seed": seed, "passes": E, "nlpd": test_nlpd(state, model, *data[2:]),
                         "learned_prior_var": _prior_vars(state)})
        jax.clear_caches()  # as in seed_rows
    return rows


def calibration_rows(task, quick=False):
    """ECE (:func:`jaxrvga.baselines.metrics.ece`) and test NLPD of a classification task's predictives:
    the grid, the one prior x scales, the learned prior, and the one prior's member read alone with
    the plug-in (scale 0) and with its own linearised predictive (scale 1)."""
    import jaxrvga as jr
    from jaxrvga.baselines.metrics import ece

    fit = fit_task(task, quick)
    model, (_, _, Xte, yte) = fit.model, fit.data
    member = jax.tree_util.tree_map(lambda a: a[0], fit.runs["one_prior_average"][2].members)
    reads = {name: (state, 1.0) for name, (_, _, state) in fit.runs.items()}
    reads.update({"one_prior_plug_in": (member, 0.0), "one_prior_linearised": (member, 1.0)})
    labels = np.asarray(yte).astype(int)
    return [{"task": task, "method": name,
             "ece": ece(np.asarray(jr.predictive(state, Xte, model, scale=c).mean), labels),
             "nlpd": test_nlpd(state, model, Xte, yte, c)} for name, (state, c) in reads.items()]


def seed_rows(task, quick=False, seeds=5):
    """Test NLPD of the three averages of a network task over ``seeds`` initial weights and orders of the
    training stream (:func:`network_task`; seed 0 is the main table's run), and the learned prior variance."""
    rows = []
    for seed in range(seeds):
        fit = fit_task(task, quick, seed)
        row = {"task": task, "seed": seed}
        row.update({name: test_nlpd(state, fit.model, *fit.data[2:]) for name, (_, _, state) in fit.runs.items()})
        row["learned_prior_var"] = _prior_vars(fit.runs["learned_prior"][2])
        rows.append(row)
        del fit
        # each seed compiles its own programs: released, or thirty fits reach Linux's default limit of
        # 65,530 memory maps (the compiled code's) and the process dies in LLVM
        jax.clear_caches()
    return rows


def run_task(task, quick=False, timing=True):
    """One task: the test NLPD of the grid's, the one-prior and the learned-prior averages' predictives and
    of the grid's members, and the costs."""
    import jaxrvga as jr

    model, flt, members, data, theta0, h, priors, k, runs = fit_task(task, quick)
    state, one_state, learned_state = (runs[name][2] for name in ("average", "one_prior_average", "learned_prior"))
    Xte, yte = data[2], data[3]
    pruned, member = jr.average.prune(state), jax.tree_util.tree_map(lambda a: a[k], members)
    out = {"task": task, "grid_nlpd": test_nlpd(state, model, Xte, yte), "priors": list(priors),
           "members": member_nlpds(state.members, model, Xte, yte),
           "one_prior": priors[k], "one_prior_nlpd": test_nlpd(one_state, model, Xte, yte),
           "learned_nlpd": test_nlpd(learned_state, model, Xte, yte),
           "pruned_nlpd": test_nlpd(pruned, model, Xte, yte), "kept_members": int(pruned.log_weight.shape[0]),
           "learned_prior_var": _prior_vars(learned_state),
           "learned_converged": bool(learned_state.info.converged),
           "prior_weights": np.asarray(jr.average.weights(state).sum(1)).tolist(),
           "scale_weights": np.asarray(jr.average.weights(state).sum(0)).tolist(),
           "converged": bool(jnp.all(state.members.info.converged)), "n_train": int(data[0].shape[0])}
    if hasattr(state.members, "noise") and state.members.noise is not None:
        out["noise_var"] = np.asarray(jr.noise.expected_variance(state.members.noise)).tolist()
    if task == "linear":
        out["reference"] = _linear_reference(data)
    else:
        out["target"] = TARGETS[task.split("-")[0]]
    if timing:
        states = {name: (f, s0) for name, (f, s0, _) in runs.items()}
        states["one_filter"] = (flt, member)
        out.update(costs(states, data, h, theta0, task))
        out.update(predictive_costs({"average": state, "pruned": pruned, "member": member}, model, Xte, yte))
    return out


def _prior_vars(state):
    """The learned prior variances of the one member, one per block (a list)."""
    return np.round(np.exp(-np.asarray(state.prior.log_precision[0], np.float64)), 4).tolist()


def mlp_sizes(task, quick=False):
    """The layer widths of a network task's MLP (``experiments.networks_any_prior.SIZES``; ``quick``: one
    hidden layer of 8)."""
    from experiments.networks_any_prior import SIZES

    sizes = SIZES[task.split("-")[0]]
    return sizes if not quick else (sizes[0], 8, sizes[-1])


def layer_sizes(sizes):
    """The number of weights and biases of each layer of :func:`experiments.networks_any_prior.mlp` (in
    its flat order): the learned prior's ``prior_groups``, one precision per layer."""
    return tuple(fan_in * fan_out + fan_out for fan_in, fan_out in zip(sizes[:-1], sizes[1:]))


def layer_groups(sizes):
    """The group of each flat weight of :func:`experiments.networks_any_prior.mlp`: ``2 l`` the weights
    and ``2 l + 1`` the biases of layer ``l``."""
    g = []
    for layer, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        g += [2 * layer] * (fan_in * fan_out) + [2 * layer + 1] * fan_out
    return np.asarray(g)


def prior_fit_rows(task, quick=False, prior_vars=(0.1, 1.0)):
    """One filter per prior variance, then ``jr.evidence.fit_prior_precision`` with one precision and
    with one per layer's weights and biases: test NLPD (plug-in, linearised) before and after."""
    import jaxrvga as jr
    from experiments.networks_any_prior import initial_state

    if task == "linear":
        model, flt, _, data = linear_task(quick)
        theta0, grouping = jnp.zeros(data[0].shape[1], jnp.float32), (("one", None),)
        start = lambda v: flt.init(theta0, v * jnp.eye(theta0.shape[0], dtype=jnp.float32))  # noqa: E731
    else:
        model, flt, _, data, theta0, _ = network_task(task, quick)
        grouping = (("one", None), ("layers", layer_groups(mlp_sizes(task, quick))))
        start = lambda v: initial_state(flt, theta0, v, False)  # noqa: E731
    Xtr, ytr, Xte, yte = data
    rows = []
    for v0 in prior_vars:
        state, _ = jr.run(flt, start(v0), Xtr, ytr)
        row = {"task": task, "prior_var": v0, "plug_in": test_nlpd(state, model, Xte, yte, 0.0),
               "linearised": test_nlpd(state, model, Xte, yte, 1.0)}
        if task == "linear":
            row["reference"] = _linear_reference(data)
        for name, groups in grouping:
            fit = jr.evidence.fit_prior_precision(state, 1.0 / v0, prior_mean=theta0, groups=groups)
            row[name] = {"precision": np.asarray(fit.precision).tolist(), "converged": bool(fit.converged),
                         "plug_in": test_nlpd(fit.state, model, Xte, yte, 0.0),
                         "linearised": test_nlpd(fit.state, model, Xte, yte, 1.0)}
        rows.append(row)
    return rows


def _linear_reference(data):
    """Test NLPD of the exact predictive with the true prior ``N(0, I)`` and noise variance 0.25."""
    import jaxrvga as jr

    d = data[0].shape[1]
    flt = jr.kalman(0.25)
    st, _ = jr.run(flt, flt.init(jnp.zeros(d, jnp.float32), jnp.eye(d, dtype=jnp.float32)), data[0], data[1])
    return test_nlpd(st, jr.models.linear_gaussian(0.25), data[2], data[3])


def _cost(r, key):
    """``"a x, b x"``: seconds of ``key`` per observation over one filter's and over Adam's."""
    if key not in r:
        return ""
    out = f"{r[key] / r['seconds_one_filter']:.1f}x"
    return out + (f", {r[key] / r['seconds_adam']:.0f}x" if "seconds_adam" in r else "")


def recipe(task) -> str:
    """The documented default of ``task``: ``"learned_prior"`` or ``"grid"`` (:data:`DEFAULT_RECIPE`)."""
    return DEFAULT_RECIPE.get(task, "learned_prior")


def _listed(values) -> str:
    return ", ".join(f"{v:.3g}" for v in np.atleast_1d(values))


def report(results):
    """The Markdown table of experiments/REPORT.md: the documented default of each task in bold."""
    head = ("| task | prior grid x scales | cost (/ one filter, / Adam) | one prior x scales | cost | "
            "prior learned x scales (learned v) | cost | "
            "best tuned plug-in of any method | own members: best plug-in / best linearised (test-chosen) |")
    lines = [head, "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        plug = min(m[0] for m in r["members"])
        lin = min(m[1] for m in r["members"])
        ref = f"{r['target']:.3f}" if "target" in r else f"{r['reference']:.3f} (exact, true hyper-parameters)"
        bold = {recipe(r["task"]): "**"}
        grid, one, learned = (f"{bold.get(k, '')}{r[key]:.3f}{bold.get(k, '')}" for k, key in
                              (("grid", "grid_nlpd"), ("one_prior", "one_prior_nlpd"),
                               ("learned_prior", "learned_nlpd")))
        lines.append(f"| {r['task']} | {grid} | {_cost(r, 'seconds_average')} | "
                     f"{one} (v = {r['one_prior']:g}) | {_cost(r, 'seconds_one_prior_average')} | "
                     f"{learned} ({_listed(r['learned_prior_var'])}) | {_cost(r, 'seconds_learned_prior')} | "
                     f"{ref} | {plug:.3f} / {lin:.3f} |")
    return "\n".join(lines)


def summary(results) -> dict:
    """Per task: ``recipe``, the documented default (:func:`recipe`), its test NLPD ``nlpd`` and with timing
    ``cost_vs_one_filter`` and ``cost_vs_adam``, its time per observation over one filter's and over optax
    Adam's (measured in one process); the same three for each average under ``grid``, ``one_prior`` and
    ``learned_prior``; with timing, the grid's ``predictive_cost_vs_member``, its log predictive per test
    point, pruned (``jr.average.prune``), over one member's."""
    def entry(r, nlpd, seconds):
        out = {"nlpd": r[nlpd]}
        if seconds in r:
            out["cost_vs_one_filter"] = r[seconds] / r["seconds_one_filter"]
            if "seconds_adam" in r:
                out["cost_vs_adam"] = r[seconds] / r["seconds_adam"]
        return out

    def predictive(r):
        key = "predictive_seconds_pruned"
        return {"predictive_cost_vs_member": r[key] / r["predictive_seconds_member"]} if key in r else {}

    def each(r):
        return {"grid": {**entry(r, "grid_nlpd", "seconds_average"), **predictive(r)},
                "one_prior": entry(r, "one_prior_nlpd", "seconds_one_prior_average"),
                "learned_prior": entry(r, "learned_nlpd", "seconds_learned_prior")}

    out = {}
    for r in results:
        averages = each(r)
        default = {k: v for k, v in averages[recipe(r["task"])].items() if k != "predictive_cost_vs_member"}
        out[r["task"]] = {"recipe": recipe(r["task"]), **default, **averages}
    return out


def run(quick: bool, out=None, tasks=TASKS, timing=True):
    """Every task; writes ``tuning_free.json`` and the table ``tuning_free.md`` (:func:`report`) and
    returns the results (the experiments' interface)."""
    out = results_dir(quick) if out is None else out
    results = [run_task(t, quick, timing) for t in tasks]
    with open(f"{out}/tuning_free.json", "w") as f:
        json.dump(results, f, indent=1)
    table = report(results)
    with open(f"{out}/tuning_free.md", "w") as f:
        f.write(table + "\n")
    print(table)
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--no-timing", action="store_true")
    parser.add_argument("--json", default=None, metavar="FILE",
                        help="also write the summary per task (nlpd, cost_vs_one_filter, cost_vs_adam)")
    parser.add_argument("--prior-fit", action="store_true",
                        help="instead: one filter, then the prior precision fitted by the evidence (REPORT.md)")
    parser.add_argument("--calibration", action="store_true",
                        help="instead: the ECE and NLPD of each predictive of the classification tasks (REPORT.md)")
    parser.add_argument("--seeds", type=int, default=0, metavar="N",
                        help="instead: the averages' test NLPD over N initial weights and orders of the stream")
    parser.add_argument("--passes", default=None, metavar="E,E",
                        help="instead: the recipe's test NLPD after E tempered passes (over --seeds N, default 1)")
    a = parser.parse_args(argv)
    rows_of = None
    if a.prior_fit:
        rows_of = prior_fit_rows
    elif a.calibration:
        rows_of = calibration_rows
    elif a.passes:
        rows_of = functools.partial(passes_rows, seeds=a.seeds or 1, passes=tuple(map(int, a.passes.split(","))))
    elif a.seeds:
        rows_of = functools.partial(seed_rows, seeds=a.seeds)
    if rows_of is not None:
        rows = [r for t in a.tasks.split(",") for r in rows_of(t, a.quick)]
        print("\n".join(json.dumps(r) for r in rows))
        return rows
    results = run(a.quick, tasks=tuple(a.tasks.split(",")), timing=not a.no_timing)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary(results), f, indent=1)
    return results


if __name__ == "__main__":
    main()
