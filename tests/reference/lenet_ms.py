"""A real MindSpore training run to judge dumpd by (issue 39): LeNet-5 sized, graph mode on
the CPU, with a loss, its backward and a Momentum step, so that the kernel graph holds
Conv2D, ReLU, MaxPool, MatMul with BiasAdd, a reduction, a Cast, parameter updates and
constants. Fixed seeds, synthetic data, STEPS steps. MindSpore dumps it itself when
MINDSPORE_DUMP_CONFIG names a job config.

    <venv>/bin/python tests/reference/lenet_ms.py [STEPS]

Prints one line per step: "step N loss L". Runs in the reference environments only.
"""

import sys

import numpy as np
import mindspore as ms
from mindspore import Tensor, nn, ops


class LeNet5(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, pad_mode="valid")
        self.conv2 = nn.Conv2d(6, 16, 5, pad_mode="valid")
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(kernel_size=2, stride=2)
        self.flatten = nn.Flatten()
        self.fc1 = nn.Dense(16 * 5 * 5, 120)
        self.fc2 = nn.Dense(120, 84)
        self.fc3 = nn.Dense(84, 10)
        self.cast = ops.Cast()
        self.mean = ops.ReduceMean(keep_dims=True)

    def construct(self, x):
        x = self.cast(x, ms.float32)  # the data arrives as float16: a Cast kernel
        x = self.pool(self.relu(self.conv1(x)))
        x = self.pool(self.relu(self.conv2(x)))
        x = self.relu(self.fc1(self.flatten(x)))
        x = self.relu(self.fc2(x))
        # A reduction with a constant axis: the hidden features centred per sample.
        return self.fc3(x - self.mean(x, 1))


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    ms.set_seed(1)
    rng = np.random.default_rng(1)
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    net = LeNet5()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)
    step = nn.TrainOneStepCell(nn.WithLossCell(net, loss), opt)
    step.set_train()
    x = Tensor(rng.standard_normal((4, 1, 32, 32)).astype(np.float16))
    y = Tensor(rng.integers(0, 10, size=(4,)).astype(np.int32))
    for i in range(steps):
        print(f"step {i} loss {float(step(x, y).asnumpy()):.6f}", flush=True)


if __name__ == "__main__":
    main()
