"""Small Relax modules for the tests and the example (TVMScript needs its
source in a file, so they live here rather than inline)."""

from tvm.script import ir as I
from tvm.script import relax as R


@I.ir_module
class MatmulRelu:
    @R.function
    def main(x: R.Tensor((128, 128), "float32"), w: R.Tensor((128, 128), "float32")):
        with R.dataflow():
            y = R.matmul(x, w)
            z = R.nn.relu(y)
            R.output(z)
        return z


@I.ir_module
class Dynamic:
    @R.function
    def main(x: R.Tensor(("n", 16), "float32")):
        with R.dataflow():
            y = R.nn.relu(x)
            R.output(y)
        return y
