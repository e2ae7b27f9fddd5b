"""lazyrt's exceptions. Each names the op, the shapes and the dtypes involved."""


class LazyrtError(Exception):
    """Base class of every error lazyrt raises on purpose."""


class ShapeError(LazyrtError, ValueError):
    """Shapes that do not fit the op (broadcasting, reshape, matmul, axes)."""


class DTypeError(LazyrtError, TypeError):
    """A dtype the op does not accept (``~`` on floats, ``&`` on floats...)."""


class AxisError(ShapeError, IndexError):
    """An axis out of range for the tensor's rank."""


class BackendError(LazyrtError, RuntimeError):
    """A backend that is unknown, unavailable here, or failed to compile."""


class CompileError(BackendError):
    """A generated kernel failed to compile: names the kernel, its source path
    and the compiler's message."""


class PerformanceWarning(RuntimeWarning):
    """lazyrt runs correctly, but slower than it could: the default backend fell
    back to the ``numpy`` interpreter, or kernels go to a temporary cache that
    every new process compiles again. The message says what to install or set."""
