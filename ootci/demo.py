"""The tables of the demo data set (``manage.py seed_demo``): backends, tests, PR titles, and the hash its SHAs
come from, so that every run makes the same data."""

import hashlib

# repo, level, device, on-calls, (workflow, [jobs]), failure rate, infra rate, median queue seconds
BACKENDS = [
    (
        "ascend/pytorch-npu",
        "L4",
        "npu",
        ["ascend-ci", "npu-oncall"],
        ("npu-ci", ["build", "test-ops", "test-nn"]),
        0.06,
        0.02,
        90,
    ),
    ("intel/torch-xpu-ops", "L4", "xpu", ["xpu-oncall"], ("xpu", ["build", "ut-ops", "ut-inductor"]), 0.09, 0.03, 240),
    ("apple/mps-ci", "L3", "mps", ["mps-oncall"], ("mps", ["test-mps"]), 0.12, 0.05, 60),
    ("riscv/pytorch-rvv", "L3", "rvv", ["rvv-maint"], ("rvv", ["cross-build", "qemu-smoke"]), 0.18, 0.10, 600),
    ("amd/rocm-oot", "L3", "rocm", ["rocm-ci"], ("rocm", ["build", "test-default"]), 0.08, 0.04, 300),
    ("cambricon/torch-mlu", "L2", "mlu", ["mlu-team"], ("mlu-ci", ["build", "test"]), 0.22, 0.08, 420),
    ("metax/torch-maca", "L2", "maca", [], ("maca", ["test"]), 0.15, 0.20, 900),
    ("iluvatar/torch-corex", "L2", "corex", ["corex-ci"], ("corex", ["build", "unit"]), 0.30, 0.06, 180),
    ("deepx/pytorch-dx", "L2", "", [], ("ci", ["smoke"]), 0.05, 0.01, 45),
    ("openxla/torch-tpu-oot", "L1", "tpu", [], ("tpu", ["build"]), 0.10, 0.10, 120),
    ("sophgo/torch-tpu", "L1", "", [], ("ci", ["build"]), 0.25, 0.15, 200),
    ("example/hello-backend", "L1", "", ["octocat"], ("hello", ["hello"]), 0.02, 0.02, 30),
]
TESTS = [
    "test/test_ops.py::TestCommonPRIVATEUSE1::test_out_add_float32",
    "test/test_nn.py::TestNNDeviceTypePRIVATEUSE1::test_conv2d_same_padding",
    "test/test_torch.py::TestTorchDeviceTypePRIVATEUSE1::test_index_copy",
    "test/test_autograd.py::TestAutogradDeviceTypePRIVATEUSE1::test_grad_mode",
    "test/inductor/test_torchinductor.py::GPUTests::test_softmax_one_kernel",
    "test/test_linalg.py::TestLinalgPRIVATEUSE1::test_matmul_small_brute_force_1d_Nd",
]
TITLES = [
    "Fix {} for non-contiguous inputs",
    "[inductor] Fuse {} into reductions",
    "Add {} support for bfloat16",
    "Speed up {} on channels_last",
    "[dynamo] Guard on {} shape",
    "Deprecate legacy {} path",
]
OPS = ["index_put", "scatter_add", "layer_norm", "conv2d", "softmax", "cumsum", "topk", "embedding_bag"]
AUTHORS = ["alice", "bob", "chen", "dmitri", "eun-ji", "farah", "gianni", "hana"]
PR_COUNT = 220
REPORTS = 400  # the latest jobs with test counts get a parsed test report
TRACEBACK = "\n".join(
    [
        "Traceback (most recent call last):",
        '  File "torch/testing/_internal/common_utils.py", line 3120, in wrapper',
        "    method(*args, **kwargs)",
        '  File "test/test_ops.py", line 412, in test_out',
        "    self.assertEqual(expected, out)",
        "AssertionError: Tensor-likes are not close!",
    ]
)
DAYS = 30


def sha(*parts) -> str:
    return hashlib.sha1("/".join(map(str, parts)).encode()).hexdigest()
