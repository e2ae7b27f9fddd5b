"""lazyrt micro-benchmarks: ``python -m bench --suite {record,cpu,gpu,torch,planning,all}``.

* ``record_overhead`` — cost of recording one op vs eager NumPy / torch.
* ``cpu`` — fused CPU kernels vs NumPy, torch (eager, compile), JAX, per backend.
* ``gpu`` — the same on CUDA vs torch eager / torch.compile.
* ``torch_suite`` — training steps through ``lazyrt.torch`` vs torch eager /
  torch.compile (``--suite torch``; models in ``torch_models``, peers in ``torch_peers``).
* ``planning`` — planning time against graph size, up to 100k ops (``--suite planning``).

``timing`` holds the shared measurement rules, ``workloads`` the computations
(written once for every library), ``report`` the table / JSON / PNG output.
Nothing here imports NumPy at package import: thread counts are set first.
The suites are run only through ``python -m bench`` (bench/__main__.py), which
imports them; they never import it back.
"""
import os

CPU_THREADS = 2
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, str(CPU_THREADS))
