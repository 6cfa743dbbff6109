"""The drop-in kernels equal the plain torch ops they replace, on both sides of the narrow-output threshold."""

from __future__ import annotations

import pytest
import torch

from rlbench.components.nets import kernels


def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_tanh_matches_torch_in_place(dtype: torch.dtype) -> None:
    h = _randn(2, 33, 17).to(dtype) * 4
    want = torch.tanh(h)
    got = kernels.tanh_(h)
    assert got.data_ptr() == h.data_ptr()  # in place, same memory
    torch.testing.assert_close(got, want, rtol=2e-7 if dtype == torch.float32 else 1e-15, atol=0.0)


def test_tanh_falls_back_for_views_and_grad() -> None:
    h = _randn(8, 6)
    view = h.t()  # not contiguous: torch's own tanh_
    want = torch.tanh(view)
    torch.testing.assert_close(kernels.tanh_(view), want)
    leaf = _randn(4, 4).requires_grad_()
    with pytest.raises(RuntimeError):  # same error as torch.tanh_ on a leaf that requires grad
        kernels.tanh_(leaf)


@pytest.mark.parametrize("n", [1, 2, kernels.NARROW - 1, kernels.NARROW, 64])
def test_baddbmm_equals_torch(n: int) -> None:
    x, w, b = _randn(2, 40, 24, seed=1), _randn(2, 24, n, seed=2), _randn(2, 1, n, seed=3)
    torch.testing.assert_close(kernels.baddbmm(b, x, w), torch.baddbmm(b, x, w), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [1, 2, kernels.NARROW - 1, kernels.NARROW, 64])
@pytest.mark.parametrize("shared", [True, False])
def test_weight_grad_equals_torch(n: int, shared: bool) -> None:
    x = _randn(40, 24, seed=4) if shared else _randn(2, 40, 24, seed=4)
    g = _randn(2, 40, n, seed=5)
    want = torch.matmul(x.t() if shared else x.transpose(1, 2), g)
    got = kernels.weight_grad(x, g)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert got.is_contiguous()  # laid out like the (E, k, n) parameter it is the gradient of
    out = torch.full_like(want, float("nan"))
    assert kernels.weight_grad(x, g, out=out) is out
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
