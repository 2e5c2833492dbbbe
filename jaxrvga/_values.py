"""Functions with bound arguments that compare by value, so that identical configurations are equal.

``jax.jit`` caches a compiled program by its static arguments. A filter built twice from the same
model and options holds new closures each time, which compare by identity, so every new filter
compiled again. Built from module-level functions and :class:`Bound` arguments instead, two
identical filters are equal and share one program. Arrays and tracers (which have no boolean
``==``) compare by identity.
"""
from __future__ import annotations


def same(a, b) -> bool:
    """Equal by value: tuples (NamedTuples included) entry by entry, arrays and unhashable objects
    by identity, anything else by type and ``==``."""
    if a is b:
        return True
    if isinstance(a, tuple) or isinstance(b, tuple):
        return (type(a) is type(b) and len(a) == len(b)
                and all(same(x, y) for x, y in zip(a, b)))
    if type(a) is not type(b):
        return False
    try:
        hash(a)
    except TypeError:  # arrays, tracers, lists: identity only
        return False
    return bool(a == b)


def value_key(a):
    """A hash key consistent with :func:`same`."""
    if isinstance(a, tuple):
        return (type(a),) + tuple(value_key(x) for x in a)
    try:
        return (type(a), hash(a))
    except TypeError:
        return ("id", id(a))


def by_value(a) -> bool:
    """Whether :func:`same` compares ``a`` wholly by value (no array, tracer or unhashable part,
    which compare by identity): only then may it key a compiled program across calls."""
    if isinstance(a, tuple):
        return all(by_value(x) for x in a)
    if isinstance(a, Bound):
        return by_value(a.args)
    try:
        hash(a)
    except TypeError:
        return False
    return True


class Static:
    """``value`` as a static ``jit`` argument compared by :func:`same` (``Static(a) == Static(b)``
    exactly when ``same(a, b)``)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        return type(other) is Static and same(self.value, other.value)

    def __hash__(self):
        return hash(value_key(self.value))


class Bound:
    """``fn`` with its leading arguments bound: ``Bound(fn, *args)(*rest) == fn(*args, *rest)``.

    Equal to another :class:`Bound` of the same ``fn`` whose arguments are :func:`same`; hashable
    accordingly (a static ``jit`` argument).
    """

    __slots__ = ("fn", "args", "__weakref__")

    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __call__(self, *rest, **keywords):
        return self.fn(*self.args, *rest, **keywords)

    def __eq__(self, other):
        return type(other) is type(self) and self.fn is other.fn and same(self.args, other.args)

    def __hash__(self):
        return hash((id(self.fn), value_key(self.args)))

    def __repr__(self):
        return f"Bound({getattr(self.fn, '__qualname__', self.fn)!r}, {len(self.args)} arguments)"


__all__ = ["same", "value_key", "by_value", "Static", "Bound"]
