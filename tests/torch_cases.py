"""The rank-6 (and rank-7) torch.export programs of issue 33, small and deterministic:
the forms real models write that Core ML refuses ("Core ML only supports tensors with
rank <= 5") or that ExecuTorch's XNNPACK delegate fails on at run time. Each is a module
and its example inputs; ``dynamic`` gives torch.export's dynamic_shapes where a batch
dim stays symbolic."""

from __future__ import annotations


def cases():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(0)

    class SwinWindows(nn.Module):
        """Swin's window partition: a view to rank 6, a permute, a view back, a bias."""

        def __init__(self, w=4, C=8):
            super().__init__()
            self.w = w
            self.bias = nn.Parameter(torch.randn(w, w, C))

        def forward(self, x):
            B, H, W, C = x.shape
            w = self.w
            x = x.view(B, H // w, w, W // w, w, C).permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, w, w, C)
            return x + self.bias

    class GroupNorm5d(nn.Module):
        """GroupNorm written out on 5-D input: a rank-6 view, means, the normalization."""

        def __init__(self, groups=4, C=8):
            super().__init__()
            self.groups = groups
            self.weight = nn.Parameter(torch.randn(1, C, 1, 1, 1))

        def forward(self, x):
            N, C, D, H, W = x.shape
            x6 = x.view(N, self.groups, C // self.groups, D, H, W)
            m = x6.mean(dim=(2, 3, 4, 5), keepdim=True)
            v = ((x6 - m) ** 2).mean(dim=(2, 3, 4, 5), keepdim=True)
            return ((x6 - m) / torch.sqrt(v + 1e-5)).view(N, C, D, H, W) * self.weight

    class UpfirdnZeros(nn.Module):
        """StyleGAN2's upfirdn zero-insert: a rank-6 view, a pad, a view back."""

        def forward(self, x):
            N, C, H, W = x.shape
            x = F.pad(x.view(N, C, H, 1, W, 1), [0, 1, 0, 0, 0, 1])
            return x.view(N, C, H * 2, W * 2)

    class TwoSided(nn.Module):
        """A rank-6 product that broadcasts both ways, then flattened."""

        def forward(self, a, b):
            B = a.shape[0]
            return (a.view(B, 1, 3, 1, 4, 1) * b.view(1, 5, 1, 6, 1, 7)).reshape(B, -1)

    class VideoPatchify(nn.Module):
        """A video ViT's patchify: a rank-7 view and permute."""

        def forward(self, x):
            B, T, C, H, W = x.shape
            p = 4
            x = x.view(B, T, C, H // p, p, W // p, p).permute(0, 1, 3, 5, 2, 4, 6)
            return x.reshape(B, T * (H // p) * (W // p), C * p * p)

    return {
        "swin_windows": (SwinWindows(), (torch.randn(2, 8, 8, 8),)),
        "groupnorm_5d": (GroupNorm5d(), (torch.randn(2, 8, 3, 4, 4),)),
        "upfirdn_zeros": (UpfirdnZeros(), (torch.randn(1, 3, 5, 6),)),
        "two_sided_product": (TwoSided(), (torch.randn(2, 3, 4), torch.randn(5, 6, 7))),
        "video_patchify": (VideoPatchify(), (torch.randn(2, 3, 3, 8, 8),)),
    }
