"""Build lazyrt: the Cython recorder extension, the package, and the CLI.

`codegen/` and `kernels/` live at the top level (they are separate stages of
the pipeline) and are installed as `lazyrt.codegen` and `lazyrt.kernels`.
"""
import re
from pathlib import Path

import numpy
from Cython.Build import cythonize
from setuptools import Extension, find_packages, setup

# the version is written once, in lazyrt/_version.py; read as text, since importing
# lazyrt here would need the extensions this script builds
VERSION = re.search(r'^__version__ = "([^"]+)"$',
                    Path(__file__).with_name("lazyrt").joinpath("_version.py").read_text(),
                    re.M).group(1)

# Intel MKL, a BLAS the C backend measures against NumPy's OpenBLAS and calls where it
# is faster (lazyrt/backends/c_mkl.py): optional, a large download, x86-64 Linux wheels
MKL = 'mkl; platform_machine == "x86_64" and sys_platform == "linux"'

extensions = [
    Extension(
        "lazyrt._recorder",
        ["lazyrt/_recorder.pyx"],
        include_dirs=[numpy.get_include()],
        extra_compile_args=["-O3"],
    ),
    Extension(
        "lazyrt._source_lines",
        ["lazyrt/_source_lines.pyx"],
        extra_compile_args=["-O3"],
    ),
    Extension(
        "lazyrt._recorder_pointwise",
        ["lazyrt/_recorder_pointwise.pyx"],
        extra_compile_args=["-O3"],
    ),
    Extension(
        "lazyrt._recorder_shapes",
        ["lazyrt/_recorder_shapes.pyx"],
        extra_compile_args=["-O3"],
    ),
    Extension(
        "lazyrt._capture",
        ["lazyrt/_capture.pyx"],
        include_dirs=[numpy.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=["-O3"],
    ),
    Extension(
        "lazyrt._launch",
        ["lazyrt/_launch.pyx"],
        include_dirs=[numpy.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=["-O3"],
    ),
]

# every package under lazyrt/ (lazyrt.torch included), found rather than listed, and
# codegen/ and kernels/ (with any sub-packages) under their installed names
PACKAGES = find_packages(include=["lazyrt", "lazyrt.*"]) + [
    f"lazyrt.{top}{'.' + sub if sub else ''}"
    for top in ("codegen", "kernels") for sub in [""] + find_packages(top)]

setup(
    name="lazyrt",
    version=VERSION,
    description="A LazyTensor runtime: record tensor ops, fuse them, generate kernels.",
    python_requires=">=3.10",
    packages=PACKAGES,
    package_dir={"lazyrt.codegen": "codegen", "lazyrt.kernels": "kernels"},
    package_data={"lazyrt.kernels": ["*.h", "*.c"], "lazyrt": ["*.pyx", "*.pxd"]},
    ext_modules=cythonize(
        extensions,
        language_level=3,
        compiler_directives={"boundscheck": False, "wraparound": False, "cdivision": True},
    ),
    install_requires=["numpy>=1.25", "rich>=13", "ml_dtypes>=0.4"],
    extras_require={
        "test": ["pytest>=7", "pytest-xdist>=3", "hypothesis>=6.80", "scipy", "triton>=3.2",
                 "array-api-compat", "array-api-strict", "scikit-learn",
                 "expecttest",  # torch's OpInfo database (tests/test_torch_opinfo.py) imports it
                 "jax[cpu]",
                 MKL],  # so the tests run the C backend's matmuls through MKL too
        "torch": ["torch"],
        "mkl": [MKL],
        "jax": ["jax[cpu]"],
        "bench": ["jax[cpu]", "matplotlib"],
    },
    entry_points={"console_scripts": ["lazyrt = lazyrt.cli:main"],
                  # torch.compile(model, backend="lazyrt") finds lazyrt without an import
                  "torch_dynamo_backends": ["lazyrt = lazyrt.torch.dynamo:compile_backend"]},
    zip_safe=False,
)
