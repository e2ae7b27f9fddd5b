"""lazyrt: a LazyTensor runtime.

Tensor code runs eagerly-looking; every op is recorded, and at a barrier the
recorded graph is captured, looked up in a program cache by its structural
key, compiled on a miss, and run.

>>> import lazyrt as lr
>>> x = lr.arange(4, dtype="float32")
>>> (x * 2 + 1).sum().item()
16.0
"""
from . import dtypes as _dtypes
from .dtypes import bool_, int8, uint8, int32, int64, float16, float32, float64, bfloat16
from .errors import (AxisError, BackendError, CompileError, DTypeError, LazyrtError,
                     PerformanceWarning, ShapeError)
from .api.tensor import Tensor
from .api.creation import (arange, asarray, empty, empty_like, eye, full, full_like, linspace,
                       ones, ones_like, tensor, zeros, zeros_like)
from .api.pointwise import (abs, add, astype, bitwise_and, bitwise_not, bitwise_or, bitwise_xor,
                        ceil, clip, cos, divide, equal, erf, erfc, exp, exp2, expm1, floor,
                        floor_divide,
                        greater, greater_equal, hypot, invert, isfinite, isinf, isnan, less,
                        less_equal, log, log1p, logical_and, logical_not, logical_or, maximum,
                        minimum, multiply, negative, not_equal, power, reciprocal, remainder,
                        round, rsqrt, sigmoid, sign, sin, softplus, sqrt, square, subtract,
                        tanh, where)
from .api.pointwise import (acos, acosh, asin, asinh, atan, atan2, atanh, bitwise_invert,
                            bitwise_left_shift, bitwise_right_shift, conj, copysign, cosh, imag,
                            log2, log10, logaddexp, logical_xor, positive, pow, real, signbit,
                            sinh, tan, trunc)
from .api.reductions import (all, any, argmax, argmin, cumulative_prod, cumulative_sum,
                             logsumexp, max, mean, min, prod, std, sum, var)
from .api.views import (broadcast_to, concat, concatenate, expand, expand_dims, flatten, permute,
                    reshape, squeeze, stack, swapaxes, transpose, unsqueeze)
from .api.linalg import matmul
from .api.manipulation import (broadcast_arrays, flip, matrix_transpose, meshgrid, moveaxis,
                               permute_dims, repeat, roll, take, tensordot, tile, tril, triu,
                               unstack, vecdot)
from .api.sorting import argsort, searchsorted, sort
from .api.indexing import index_add, scatter_add, take_along_axis
from .api import linalg
from .api.creation import from_dlpack
from .api.device import Device
from .api.data_dependent import (nonzero, unique_all, unique_counts, unique_inverse,
                                 unique_values)
from .api.namespace import (__array_api_version__, __array_namespace_info__, can_cast, e,
                            finfo, iinfo, inf, isdtype, nan, newaxis, pi, result_type)
from .runtime import (available_backends, backend, mark_step, set_backend,
                      set_max_graph_nodes, sync)
from . import backends, debug, metrics, runtime
from ._version import __version__
from .api import nn
from .api import random

bool = bool_
