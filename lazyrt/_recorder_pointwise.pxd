# cython: language_level=3
cdef int binary_comp(int op, int a, int b) noexcept
cdef int scalar_comp(int op, int a, int kind) noexcept
