"""The fixture every torch front-end test module shares (imported by name:
``from torch_fixtures import torch_backend``): each test runs on every backend
the front-end is tested on, with nothing pending before or after it."""
import pytest

import lazyrt as lr
from lazyrt.torch.testing import backends


@pytest.fixture(params=backends())
def torch_backend(request):
    lr.sync()
    with lr.backend(request.param):
        yield request.param
        lr.sync()
