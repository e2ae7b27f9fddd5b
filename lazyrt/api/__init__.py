"""The native API users call: the ``Tensor`` class and the functions on it.

Each function checks shapes and dtypes as eager code would and records a
node (through the Cython recorder); nothing here runs a kernel. ``lazyrt``
re-exports every public name, so users write ``import lazyrt as lr``.
"""
