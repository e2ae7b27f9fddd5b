"""What a compiled graph's outputs may share with its inputs: what eager's do, and
nothing more. lazyrt records ``x.clone()`` as ``x`` itself, so a program can hand an
input's memory back as an output; the replay copies such an output (AOTAutograd
rebuilds the outputs that should alias an input from the input itself)."""
import pytest
import torch

import lazyrt.torch as lt
from torch_compile_fixtures import CORE_BACKENDS, fresh_dynamo  # noqa: F401

CASES = {
    "clone": lambda x: x.clone(),
    "contiguous_clone": lambda x: x.t().contiguous().t().clone(),
    "to_same_dtype_copy": lambda x: x.to(torch.float32, copy=True),
    "reshape": lambda x: x.reshape(-1),          # a view in eager: shares
    "detach": lambda x: x.detach(),              # shares in eager too
    "add_zero": lambda x: x + 0,
}


def _shares(f, x):
    y = f(x)
    before = x.clone()
    y.add_(100)
    return not torch.equal(x, before)


@pytest.mark.parametrize("backend", CORE_BACKENDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_outputs_alias_the_inputs_as_eager_outputs_do(backend, name):
    f = CASES[name]
    compiled = torch.compile(f, backend=lt.backend(backend))
    for _ in range(3):  # the recording call, then replays
        x = torch.arange(6.0).reshape(2, 3)
        assert _shares(compiled, x) == _shares(f, torch.arange(6.0).reshape(2, 3)), name


@pytest.mark.parametrize("backend", CORE_BACKENDS)
def test_replayed_outputs_are_new_tensors_on_every_call(backend):
    compiled = torch.compile(lambda x: (x * 2).exp(), backend=lt.backend(backend))
    x = torch.randn(5)
    a = compiled(x)
    b = compiled(x)
    c = compiled(x)
    assert a.data_ptr() != b.data_ptr() and b.data_ptr() != c.data_ptr()
    torch.testing.assert_close(a, b)
    a.zero_()  # the caller owns each result: writing one leaves the others
    torch.testing.assert_close(b, (x * 2).exp())

