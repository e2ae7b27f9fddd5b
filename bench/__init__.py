"""lazyrt micro-benchmarks: ``python -m bench --suite {record,cpu,gpu,all}``.

* ``record_overhead`` — cost of recording one op vs eager NumPy / torch.
* ``cpu`` — fused CPU kernels vs NumPy, torch (eager, compile), JAX, per backend.
* ``gpu`` — the same on CUDA vs torch eager / torch.compile.

``timing`` holds the shared measurement rules, ``workloads`` the computations
(written once for every library), ``report`` the table / JSON / PNG output.
Nothing here imports NumPy at package import: thread counts are set first.
"""
