# cython: language_level=3
"""The C-level entry of :mod:`lazyrt._source_lines` the recorder calls per node."""

cdef object user_frame(int* offset)
