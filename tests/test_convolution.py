"""Convolution and pooling (lazyrt.api.convolution, the aten lowerings) against
eager torch: forward and both gradients on random inputs over the parameter
space torch takes (1-3 spatial axes, stride, padding incl. "same", dilation,
groups incl. depthwise, transposed with output_padding, ceil_mode,
count_include_pad, adaptive windows), on every backend, and a small CNN trained
on device ``lazy`` with no fallback and eager's losses."""
import copy

import numpy as np
import pytest

import lazyrt as lr

torch = pytest.importorskip("torch")
F = torch.nn.functional

CONVS = [  # nd, (N, C, O, size, kernel, stride, padding, dilation, groups)
    (1, (3, 6, 6, 17, 5, 2, 2, 2, 6)),
    (2, (2, 4, 6, 9, 3, 1, 1, 1, 1)),
    (2, (2, 4, 6, 10, 3, 2, 1, 1, 2)),
    (2, (2, 3, 5, 8, 1, 2, 0, 1, 1)),
    (2, (1, 4, 4, 7, 3, 1, "same", 2, 1)),
    (2, (2, 3, 2, 6, 2, 3, "valid", 1, 1)),
    (2, (0, 3, 4, 6, 3, 1, 1, 1, 1)),
    (3, (1, 2, 4, 6, 3, 1, 0, 1, 1)),
]


def _close(got, want, rtol=2e-5):
    want = want.detach().numpy()
    got = np.asarray(got)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * max(1.0, np.abs(want).max()
                                                                    if want.size else 1.0))


def _random(rng, shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("nd, case", CONVS, ids=[str(c) for _, c in CONVS])
def test_conv_and_its_gradients_match_torch(backend, nd, case):
    n, c, o, size, k, stride, padding, dilation, groups = case
    rng = np.random.default_rng(hash(case) % 2**32)
    x = _random(rng, (n, c) + (size,) * nd)
    w = _random(rng, (o, c // groups) + (k,) * nd)
    b = _random(rng, (o,))
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    conv = (F.conv1d, F.conv2d, F.conv3d)[nd - 1]
    want = conv(xt, wt, torch.tensor(b), stride, padding, dilation, groups)
    got = lr.nn.conv(lr.asarray(x), lr.asarray(w), lr.asarray(b), stride, padding, dilation,
                     groups)
    _close(got, want)
    g = _random(rng, tuple(want.shape))
    want.backward(torch.tensor(g))
    CV = lr.api.convolution
    _close(CV.conv_input_grad(lr.asarray(g), lr.asarray(w), x.shape, stride, padding, dilation,
                              groups), xt.grad)
    _close(CV.conv_weight_grad(lr.asarray(x), lr.asarray(g), w.shape, stride, padding, dilation,
                               groups), wt.grad)


@pytest.mark.parametrize("stride, padding, output_padding, groups, dilation",
                         [(2, 1, 1, 1, 1), (1, 0, 0, 2, 1), (3, 2, 1, 1, 2)])
def test_conv_transpose_matches_torch(backend, stride, padding, output_padding, groups, dilation):
    rng = np.random.default_rng(stride * 7 + padding)
    x, w = _random(rng, (2, 4, 5, 6)), _random(rng, (4, 3, 3, 2))
    b = _random(rng, (3 * groups,))
    want = F.conv_transpose2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), stride, padding,
                              output_padding, groups, dilation)
    got = lr.nn.conv_transpose(lr.asarray(x), lr.asarray(w), lr.asarray(b), stride, padding,
                               output_padding, groups, dilation)
    _close(got, want)


POOLS = [(3, 2, 1, 1, False), (2, 2, 0, 1, False), (3, 2, 1, 1, True), (3, 1, 1, 2, False),
         (2, 3, 1, 1, True)]


@pytest.mark.parametrize("k, s, p, d, ceil", POOLS)
def test_max_pool_values_indices_and_gradient_match_torch(backend, k, s, p, d, ceil):
    rng = np.random.default_rng(k * 10 + s)
    x = _random(rng, (2, 3, 9, 8))
    x[0, 0, 1, 1] = np.nan  # NaN wins its windows, as eager's
    xt = torch.tensor(x, requires_grad=True)
    want, want_idx = F.max_pool2d(xt, k, s, p, d, ceil_mode=ceil, return_indices=True)
    got, idx = lr.nn.max_pool(lr.asarray(x), k, s, p, d, ceil, return_indices=True)
    _close(got, want)
    np.testing.assert_array_equal(np.asarray(idx), want_idx.numpy())
    g = _random(rng, tuple(want.shape))
    want.backward(torch.tensor(g))
    _close(lr.api.convolution.max_pool_grad(lr.asarray(g), idx, x.shape), xt.grad)


@pytest.mark.parametrize("k, s, p, ceil, include, divisor",
                         [(3, 2, 1, False, True, None), (3, 2, 1, True, False, None),
                          (2, 2, 0, False, True, None), (3, 2, 1, True, True, 5)])
def test_avg_pool_and_gradient_match_torch(backend, k, s, p, ceil, include, divisor):
    rng = np.random.default_rng(k + s * 3)
    x = _random(rng, (2, 3, 9, 7))
    xt = torch.tensor(x, requires_grad=True)
    want = F.avg_pool2d(xt, k, s, p, ceil, include, divisor)
    _close(lr.nn.avg_pool(lr.asarray(x), k, s, p, ceil, include, divisor), want)
    g = _random(rng, tuple(want.shape))
    want.backward(torch.tensor(g))
    _close(lr.api.convolution.avg_pool_grad(lr.asarray(g), x.shape, k, s, p, ceil, include,
                                            divisor), xt.grad)


@pytest.mark.parametrize("size, out", [(9, 4), (8, 4), (7, 3), (5, 1), (6, 6)])
def test_adaptive_avg_pool_and_gradient_match_torch(backend, size, out):
    rng = np.random.default_rng(size)
    x = _random(rng, (2, 3, size, size + 1))
    xt = torch.tensor(x, requires_grad=True)
    want = F.adaptive_avg_pool2d(xt, (out, out + 1))
    _close(lr.nn.adaptive_avg_pool(lr.asarray(x), (out, out + 1)), want)
    g = _random(rng, tuple(want.shape))
    want.backward(torch.tensor(g))
    _close(lr.api.convolution.adaptive_avg_pool_grad(lr.asarray(g), x.shape), xt.grad)


@pytest.mark.parametrize("mode, align", [("nearest", None), ("nearest-exact", None),
                                         ("bilinear", False), ("bilinear", True)])
@pytest.mark.parametrize("resize", [dict(scale_factor=2), dict(size=(8, 11)),
                                    dict(scale_factor=0.5)], ids=["x2", "size", "half"])
def test_interpolate_and_its_gradient_match_torch_on_lazy(mode, align, resize):
    import lazyrt.torch as lt
    x = torch.randn(2, 3, 5, 7, requires_grad=True)
    xl = x.detach().to("lazy").requires_grad_()
    kw = {} if align is None else dict(align_corners=align)
    want, got = (F.interpolate(t, mode=mode, **resize, **kw) for t in (x, xl))
    g = torch.randn(want.shape)
    want.backward(g)
    got.backward(g.to("lazy"))
    lt.mark_step()
    _close(lt.eager(got), want, 1e-6)
    _close(lt.eager(xl.grad), x.grad, 1e-6)


def test_native_interpolate_matches_torch_in_three_dimensions(backend):
    rng = np.random.default_rng(3)
    x = _random(rng, (1, 2, 3, 4, 5))
    want = F.interpolate(torch.tensor(x), size=(5, 6, 4), mode="trilinear", align_corners=False)
    _close(lr.nn.interpolate(lr.asarray(x), (5, 6, 4), "linear"), want, 1e-6)


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_and_its_running_statistics_match_torch(backend, training):
    rng = np.random.default_rng(4)
    x = _random(rng, (4, 3, 5, 6))
    w, b, mean = _random(rng, (3,)), _random(rng, (3,)), _random(rng, (3,))
    var = rng.uniform(0.5, 2, 3).astype(np.float32)
    tm, tv = torch.tensor(mean), torch.tensor(var)
    want = F.batch_norm(torch.tensor(x), tm, tv, torch.tensor(w), torch.tensor(b), training, 0.2)
    lm, lv = lr.asarray(mean), lr.asarray(var)
    got = lr.nn.batch_norm(lr.asarray(x), lm, lv, lr.asarray(w), lr.asarray(b), training, 0.2)
    _close(got, want)
    _close(lm, tm)
    _close(lv, tv)
    with pytest.raises(lr.ShapeError, match=r"weight must have shape \(3,\)"):
        lr.nn.batch_norm(lr.asarray(x), weight=lr.zeros(4))


def test_conv_refuses_mismatched_shapes_with_the_shapes_in_the_message():
    x = lr.zeros((1, 3, 8, 8))
    with pytest.raises(lr.ShapeError, match=r"3 channels.*\(4, 2, 3, 3\)"):
        lr.nn.conv(x, lr.zeros((4, 2, 3, 3)))
    with pytest.raises(lr.ShapeError, match="does not fit the padded input"):
        lr.nn.conv(x, lr.zeros((4, 3, 9, 9)))
    with pytest.raises(lr.ShapeError, match="groups=2 must divide"):
        lr.nn.conv(x, lr.zeros((3, 3, 3, 3)), groups=2)
    with pytest.raises(lr.ShapeError, match="padding='same' needs stride 1"):
        lr.nn.conv(x, lr.zeros((4, 3, 3, 3)), stride=2, padding="same")
    with pytest.raises(lr.ShapeError, match="at most half the kernel"):
        lr.nn.max_pool(x, 2, padding=2)


class _SmallCNN(torch.nn.Module):
    """Every lowered form in one step: conv (bias or not, strided, depthwise, 1x1),
    batch norm, max/avg/adaptive pooling, a transposed conv, a residual add."""

    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.c1, self.b1 = nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.c2, self.b2 = nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16)
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.down = nn.Conv2d(8, 16, 1, stride=2)
        self.up = nn.ConvTranspose2d(16, 8, 2, stride=2)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.b1(self.c1(x))), 3, 1, 1)
        y = self.dw(F.relu(self.b2(self.c2(x))) + self.down(x))
        z = self.up(F.avg_pool2d(y, 3, 1, 1))
        return self.fc(F.adaptive_avg_pool2d(z, 1).flatten(1))


class _TinyUNet(torch.nn.Module):
    """Two levels of a U-Net: conv blocks, max-pool down, bilinear or transposed
    up, the skip joined by cat."""

    def __init__(self, bilinear):
        super().__init__()
        nn = torch.nn
        self.enc = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.mid = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.ReLU())
        self.up = (nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True) if bilinear
                   else nn.ConvTranspose2d(16, 16, 2, stride=2))
        self.dec = nn.Conv2d(24, 2, 1)

    def forward(self, x):
        e = self.enc(x)
        return self.dec(torch.cat([e, self.up(self.mid(F.max_pool2d(e, 2)))], 1))


@pytest.mark.parametrize("model, optimizer", [
    (_SmallCNN, lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)),
    (lambda: _TinyUNet(True), lambda p: torch.optim.AdamW(p, lr=1e-2)),
    (lambda: _TinyUNet(False), lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9))],
    ids=["cnn-sgd", "unet-bilinear-adamw", "unet-transposed-sgd"])
def test_cnns_train_on_lazy_like_eager_in_one_graph_per_step(fresh_metrics, model, optimizer):
    import lazyrt.torch as lt
    torch.manual_seed(0)
    eager = model()
    lazy = lt.lazy(copy.deepcopy(eager))
    opt, lopt = optimizer(eager.parameters()), optimizer(lazy.parameters())
    unet = isinstance(eager, _TinyUNet)
    for step in range(4):
        x = torch.randn(4, 3, 12, 12)
        t = torch.randint(0, 2, (4, 12, 12)) if unet else torch.randint(0, 10, (4,))
        loss = F.cross_entropy(eager(x), t)
        opt.zero_grad()
        loss.backward()
        opt.step()
        graphs = lr.metrics.snapshot()["graphs_executed"]
        lazy_loss = F.cross_entropy(lazy(x.to("lazy")), t.to("lazy"))
        lopt.zero_grad()
        lazy_loss.backward()
        lopt.step()
        lt.mark_step()
        assert abs(lazy_loss.item() - loss.item()) <= 1e-5 * max(1.0, abs(loss.item()))
        if step >= 2:
            assert lr.metrics.snapshot()["graphs_executed"] - graphs == 1
    assert dict(lr.metrics.snapshot()["fallbacks"]) == {}
    if isinstance(opt, torch.optim.AdamW):
        return  # Adam scales a conv bias's ~1e-9 gradient (BN cancels it) up to lr: noise
    for p, q in zip(eager.parameters(), lazy.parameters()):
        np.testing.assert_allclose(lt.eager(q).detach().numpy(), p.detach().numpy(), rtol=1e-4,
                                   atol=1e-5)
