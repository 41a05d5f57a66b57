"""gpuhive's start-up for a program on a share of a GPU (standard library only).

gpuhive ships this file to the host as `sitecustomize.py` and puts its folder first on
PYTHONPATH of jobs and kernels that hold a share of one GPU (jobs/caps.py). Python imports it
at start-up. It imports no framework itself: it waits until the program imports PyTorch or
TensorFlow and caps it right after that import, from what gpuhive put in the environment:

- PyTorch: `torch.cuda.set_per_process_memory_fraction(GPUHIVE_SHARE)` on every visible
  device, queued to run when CUDA initializes (never earlier: a program that forks workers
  before touching the GPU keeps working);
- TensorFlow: one logical device per GPU with `memory_limit` GPUHIVE_SHARE_MIB
  (`tf.config.set_logical_device_configuration`, before the GPUs are initialized).

JAX reads XLA_PYTHON_CLIENT_MEM_FRACTION itself. After installing its hook this file runs the
next `sitecustomize` on the path (an environment's own), as Python would have without it.
A framework that refuses (already initialized, no GPU) is left as it is.
"""

import os
import sys

FRACTION_ENV = "GPUHIVE_SHARE"
MIB_ENV = "GPUHIVE_SHARE_MIB"
CAPPED = ("torch", "tensorflow")


def _number(name, kind):
    try:
        value = kind(os.environ[name])
    except (KeyError, ValueError):
        return None
    return value if value > 0 else None


def cap_torch(torch):
    """Queue the per-process memory fraction for when CUDA initializes."""
    fraction = _number(FRACTION_ENV, float)
    cuda = getattr(torch, "cuda", None)
    lazy = getattr(cuda, "_lazy_call", None)
    if fraction is None or cuda is None or lazy is None:
        return

    def apply():
        for device in range(cuda.device_count()):
            cuda.set_per_process_memory_fraction(min(fraction, 1.0), device)

    lazy(apply)


def cap_tensorflow(tf):
    """Give each GPU one logical device limited to the share's memory."""
    mib = _number(MIB_ENV, int)
    config = getattr(tf, "config", None)
    if mib is None or config is None:
        return
    for gpu in config.list_physical_devices("GPU"):
        limit = [config.LogicalDeviceConfiguration(memory_limit=mib)]
        config.set_logical_device_configuration(gpu, limit)


class _Hook:
    """A meta path finder that runs a cap right after a capped framework is imported."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in CAPPED:
            return None
        import importlib.machinery

        sys.meta_path.remove(self)  # find it the usual way, once
        try:
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module
        cap = cap_torch if fullname == "torch" else cap_tensorflow

        def exec_module(module):
            run(module)
            try:
                cap(module)
            except Exception as error:  # the program runs uncapped, and says so
                print(f"gpuhive: could not cap {fullname} to the share: {error}", file=sys.stderr)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _next_sitecustomize():
    """Run the `sitecustomize` this one hides (later on the path), if there is one."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


if os.environ.get(FRACTION_ENV) or os.environ.get(MIB_ENV):
    sys.meta_path.insert(0, _Hook())
if __name__ == "sitecustomize":
    _next_sitecustomize()
