"""Which tasks the farm leaves untuned (`tunefleet.relax.is_trivial`): a pure
rule, checked on the shares ResNet-50's tasks have."""

from tunefleet.relax import MAC_TRIVIAL_FLOPS_SHARE, TRIVIAL_FLOPS_SHARE, is_trivial

TOTAL = 8.2e9  # ResNet-50's FLOPs, weighted


def test_elementwise_and_data_movement_are_trivial_whatever_their_size():
    assert is_trivial(1e9, 1, TOTAL, reductions=0)
    assert is_trivial(None, 1, TOTAL, reductions=0)


def test_a_small_pooling_is_trivial_a_small_convolution_is_not():
    # ResNet-50's 1x1 convolution with 0.3% of the FLOPs took 5% of the tuned
    # model's time on the generic schedule: a multiply-accumulate is tuned.
    conv = 0.003 * TOTAL
    assert TRIVIAL_FLOPS_SHARE > 0.003 > MAC_TRIVIAL_FLOPS_SHARE
    assert not is_trivial(conv, 1, TOTAL, reductions=1, macs=1)
    assert is_trivial(conv, 1, TOTAL, reductions=1, macs=0)  # a pooling of that size
    # The classifier's matmul, 0.05%: tuned as well.
    assert not is_trivial(0.0005 * TOTAL, 1, TOTAL, reductions=1, macs=1)


def test_tiny_reductions_stay_trivial_and_unknown_flops_are_tuned():
    assert is_trivial(4000, 1, TOTAL, reductions=2, macs=1)  # a softmax
    assert not is_trivial(None, 1, TOTAL, reductions=1, macs=1)
    assert not is_trivial(0.01 * TOTAL, 1, TOTAL, reductions=1, macs=0)
