"""The aten registry: what the lazy dispatcher (and any other front-end that
hands over aten calls, such as a torch.compile backend) runs for an overload.

One table per kind of rule, each filled through its ``register_*`` decorator by
the modules of :mod:`lazyrt.torch.lowerings`; this module imports no lowering
and depends on no dispatch state.

- :data:`LOWERINGS`: overload → function of the call's own arguments that
  records lazyrt tensors (or returns ``NotImplemented`` for a form it declines);
- :data:`BARRIERS`: overloads whose value must be computed (``item()``,
  ``cpu()``); the function returns torch values;
- :data:`RANDOM`: random draws and dropout, which return lazy tensors themselves
  (Philox, or torch's draws in eager-mask mode);
- :data:`KEEP_DECOMPOSITION`: lowered overloads whose lowering declines some
  forms, so torch's decomposition of them stays behind the lowering.

Example (in a module of :mod:`lazyrt.torch.lowerings`)::

    @register_lowering(aten.relu.default)
    def _relu(a):
        ...
"""
from __future__ import annotations

LOWERINGS: dict = {}
BARRIERS: dict = {}
RANDOM: dict = {}
KEEP_DECOMPOSITION: set = set()


def _registrar(table, overloads):
    if not overloads:
        raise TypeError("lazyrt.torch.registry: register at least one aten overload")

    def register(fn):
        for o in overloads:
            table[o] = fn
        return fn
    return register


def register_lowering(*overloads, keep_decomposition=False):
    """Decorator: ``fn`` lowers each of ``overloads`` (aten ``OpOverload`` objects).
    ``keep_decomposition``: ``fn`` declines some forms, which then take torch's
    decomposition (see :func:`keep_decomposition`)."""
    if keep_decomposition:
        KEEP_DECOMPOSITION.update(overloads)
    return _registrar(LOWERINGS, overloads)


def register_barrier(*overloads):
    """Decorator: ``fn`` computes the value of each of ``overloads`` (tried first)."""
    return _registrar(BARRIERS, overloads)


def register_random(*overloads):
    """Decorator: ``fn`` draws the random values of each of ``overloads`` (tried after
    the lowerings)."""
    return _registrar(RANDOM, overloads)


def keep_decomposition(*overloads):
    """Keep torch's decomposition of lowered ``overloads`` behind their lowering, for
    the forms the lowering declines (returns ``NotImplemented`` for)."""
    KEEP_DECOMPOSITION.update(overloads)


def overloads_of(packet, *names):
    """``packet.<name>`` for each overload name that exists (``default``, ``Tensor``...)
    and returns a tensor (``copysign.default`` is the Python-number form)."""
    found = [getattr(packet, n) for n in names if n in packet.overloads()]
    return [o for o in found if str(o._schema.returns[0].type) == "Tensor"]
