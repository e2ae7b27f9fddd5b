"""Where a tensor's data lives: the array API's ``device``.

lazyrt has one device, the host (``"cpu"``): every leaf is a NumPy array and
every computed value comes back as one. The *backend* (``lr.set_backend``,
``with lr.backend(...)``) is a different choice: how kernels are generated
and run. The ``triton`` backend copies a graph's inputs to the GPU, runs
there and copies the results back; the tensors it produces still live on
``"cpu"``.

>>> import lazyrt as lr
>>> x = lr.ones(3)
>>> x.device
Device('cpu')
>>> x.device == "cpu", x.to_device("cpu").device == x.device
(True, True)
"""
from __future__ import annotations


class Device:
    """A device lazyrt tensors can live on (only ``Device("cpu")``).

    Equal to another ``Device`` of the same name and to its name as a string,
    so ``x.device == "cpu"`` and ``lr.zeros(3, device=x.device)`` both work.
    """

    __slots__ = ("name",)

    def __init__(self, name: str = "cpu"):
        if name != "cpu":
            raise ValueError(f"lazyrt.Device: {name!r} is not a lazyrt device; tensors live on "
                             "'cpu' (the backend, lr.set_backend, decides where kernels run)")
        self.name = name

    def __eq__(self, other):
        if isinstance(other, Device):
            return other.name == self.name
        if isinstance(other, str):
            return other == self.name
        return NotImplemented

    def __hash__(self):
        return hash(self.name)

    def __repr__(self):
        return f"Device({self.name!r})"

    def __str__(self):
        return self.name


CPU = Device("cpu")


def check_device(device, fn: str) -> Device:
    """``device`` as a :class:`Device`, or a ValueError naming ``fn``.

    ``None`` means the default device (the host).
    """
    if device is None or device is CPU:
        return CPU
    if isinstance(device, Device) or (isinstance(device, str) and device == "cpu"):
        return CPU
    raise ValueError(f"lazyrt.{fn}: device {device!r} is not supported; lazyrt tensors live on "
                     "'cpu' (use device='cpu', x.device or None). To run kernels on a GPU, "
                     "choose the backend instead: lr.set_backend('triton')")
