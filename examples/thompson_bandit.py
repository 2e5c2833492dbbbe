"""Thompson sampling for a contextual bandit, one filter per arm:
``python -m examples.thompson_bandit``.

K arms, each with unknown weights ``theta_k ~ N(0, I_d)``; at each round a context
``x`` arrives, the policy pulls one arm and observes its reward, ``x^T theta_k +
N(0, 1)`` (``--reward linear``) or a Bernoulli draw of probability
``sig(x^T theta_k)`` (``--reward logistic``). Each arm's belief is a filter,
``jr.kalman(1.0)`` or the implicit ``jr.rvga(jr.models.logistic())``, from the prior
``N(0, I)``, and the K filters form one vmapped fleet (``jax.vmap(flt.init)``). Each
round:

* **Thompson sampling** draws one ``theta_k`` from each arm's belief (``jr.sample``)
  and pulls the arm whose draw scores best, ``argmax_k x^T theta_k``;
* **greedy** pulls ``argmax_k x^T mean_k``;
* **epsilon-greedy** pulls a uniformly random arm with probability ``epsilon``, else
  the greedy one;

then ``jr.masked_update`` updates the pulled arm only (the others keep their state bit
for bit). The regret of a round is the best arm's expected reward minus the pulled
arm's. Every policy sees the same arms, contexts and reward noise (common random
numbers), in two settings: ``contextual``, ``x ~ N(0, I_d)``, and ``no_context``,
``x = e_1`` at every round (the K-armed bandit: only ``theta_k[0]`` matters). One
``lax.scan`` over the rounds, vmapped over the seeds.

What it shows (K = 5, d = 5, 2000 rounds, 20 seeds, linear rewards; cumulative
regret, mean +- standard error): without a context Thompson sampling has by far the
smallest regret (43 +- 8, against 225 +- 99 for greedy, which locks onto a wrong arm
for ever in 7 of the 20 seeds, and 282 +- 33 for epsilon = 0.1, which pays epsilon
times the mean gap at every round). With rich contexts greedy has the smallest regret
(101 +- 7 against 125 +- 4): the contexts vary enough to explore for it (Bastani,
Bayati & Khosravi, *Mostly exploration-free algorithms for contextual bandits*,
Management Science 2021), and Thompson sampling's draws cost it regret in the first
few hundred rounds (104 against 85 at round 500); epsilon-greedy (606 +- 21) keeps
exploring at random. Logistic rewards (``--reward logistic``) give the same ordering:
29 / 137 / 79 without a context, 65 / 45 / 108 with one (Thompson / greedy /
epsilon-greedy).
"""
from __future__ import annotations

import argparse
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxrvga as jr

POLICIES = ("thompson", "greedy", "epsilon_greedy")
SETTINGS = ("contextual", "no_context")


def arm_filter(reward: str):
    """The filter of one arm: the Kalman filter of a unit noise variance, or the
    implicit R-VGA of the logistic model."""
    if reward == "linear":
        return jr.kalman(1.0)
    if reward == "logistic":
        return jr.rvga(jr.models.logistic())
    raise ValueError(f"reward must be 'linear' or 'logistic', got {reward!r}")


def problem(setting: str, num_arms: int, dim: int, rounds: int, seed: int):
    """``(theta (K, d), contexts (T, d), uniforms (T,))`` of one seed: the arms'
    weights, the contexts and the uniforms that draw each round's reward (common to
    every policy)."""
    rng = np.random.default_rng(seed)
    theta = rng.normal(size=(num_arms, dim))
    if setting == "contextual":
        contexts = rng.normal(size=(rounds, dim))
    elif setting == "no_context":
        contexts = np.zeros((rounds, dim))
        contexts[:, 0] = 1.0
    else:
        raise ValueError(f"setting must be one of {SETTINGS}, got {setting!r}")
    uniforms = rng.uniform(size=rounds)
    return tuple(jnp.asarray(a, jnp.float32) for a in (theta, contexts, uniforms))


def choose(policy: str, fleet, x, key, epsilon: float):
    """The arm ``policy`` pulls for context ``x`` given the fleet of beliefs."""
    num_arms = fleet.mean.shape[0]
    k_draw, k_explore, k_arm = jax.random.split(key, 3)
    if policy == "thompson":  # one exact draw of each arm's belief
        keys = jax.random.split(k_draw, num_arms)
        draws = jax.vmap(lambda s, k: jr.sample(s, k, 1)[0])(fleet, keys)
        return jnp.argmax(draws @ x)
    greedy = jnp.argmax(fleet.mean @ x)
    if policy == "greedy":
        return greedy
    explore = jax.random.uniform(k_explore) < epsilon
    return jnp.where(explore, jax.random.randint(k_arm, (), 0, num_arms), greedy)


def play(policy: str, reward: str, theta, contexts, uniforms, key, epsilon: float):
    """``(regret per round (T,), pulls per arm (K,))`` of ``policy`` on one problem."""
    flt = arm_filter(reward)
    num_arms, dim = theta.shape
    prior_cov = jnp.broadcast_to(jnp.eye(dim, dtype=jnp.float32), (num_arms, dim, dim))
    fleet = jax.vmap(flt.init)(jnp.zeros((num_arms, dim), jnp.float32), prior_cov)

    def one_round(fleet, inputs):
        x, u, key = inputs
        arm = choose(policy, fleet, x, key, epsilon)
        eta = theta @ x
        if reward == "linear":  # noise N(0, 1): the inverse CDF of the shared uniform
            expected = eta
            y = eta[arm] + jnp.sqrt(2.0) * jax.scipy.special.erfinv(2.0 * u - 1.0)
        else:
            expected = jax.nn.sigmoid(eta)
            y = (u < expected[arm]).astype(jnp.float32)
        mask = jnp.arange(num_arms) == arm
        fleet = jr.masked_update(flt, fleet, jnp.broadcast_to(x, (num_arms, dim)),
                                 jnp.broadcast_to(y, (num_arms,)), mask)
        return fleet, jnp.max(expected) - expected[arm]

    keys = jax.random.split(key, contexts.shape[0])
    fleet, regret = jax.lax.scan(one_round, fleet, (contexts, uniforms, keys))
    return regret, fleet.step


def main(rounds: int = 2000, num_arms: int = 5, dim: int = 5, seeds: int = 20,
         epsilon: float = 0.1, reward: str = "linear", verbose: bool = True) -> dict:
    """Cumulative regret of each policy in each setting, mean and standard error over
    the seeds; also the mean cumulative regret curves and the pulls per arm."""
    out = {"rounds": rounds, "seeds": seeds, "reward": reward}
    runs = {policy: jax.jit(jax.vmap(functools.partial(play, policy, reward,
                                                       epsilon=epsilon)))
            for policy in POLICIES}  # one program per policy, for both settings
    start = time.perf_counter()
    for setting in SETTINGS:
        problems = [problem(setting, num_arms, dim, rounds, 1000 * s + 1)
                    for s in range(seeds)]
        theta, contexts, uniforms = (jnp.stack(p) for p in zip(*problems))
        keys = jax.random.split(jax.random.PRNGKey(0), seeds)
        out[setting] = {}
        for policy in POLICIES:
            regret, pulls = runs[policy](theta, contexts, uniforms, keys)
            total = np.cumsum(np.asarray(regret, np.float64), axis=1)
            last = total[:, -1]
            out[setting][policy] = {"regret": float(last.mean()),
                                    "stderr": float(last.std(ddof=1) / np.sqrt(seeds)),
                                    "curve": total.mean(axis=0),
                                    "pulls": np.asarray(pulls)}
    out["seconds"] = time.perf_counter() - start
    if verbose:
        print(f"K = {num_arms} arms, d = {dim}, {reward} rewards, {rounds} rounds, "
              f"{seeds} seeds ({out['seconds']:.1f} s, compile included)")
        print("cumulative regret at the last round, mean +- standard error:")
        print(f"  {'':16s}" + "".join(f"{s:>20s}" for s in SETTINGS))
        for policy in POLICIES:
            label = f"epsilon = {epsilon:g}" if policy == "epsilon_greedy" else policy
            cells = "".join(f"{out[s][policy]['regret']:12.1f} +- "
                            f"{out[s][policy]['stderr']:4.1f}" for s in SETTINGS)
            print(f"  {label:16s}{cells}")
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--arms", type=int, default=5)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--epsilon", type=float, default=0.1)
    parser.add_argument("--reward", choices=["linear", "logistic"], default="linear")
    a = parser.parse_args()
    main(a.rounds, num_arms=a.arms, seeds=a.seeds, epsilon=a.epsilon, reward=a.reward)
