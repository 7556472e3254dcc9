"""npuflow: transformer encoders and int8 MatMuls offloaded from stock ONNX Runtime (a plugin
execution provider) and from llama.cpp (a ggml backend), on RK3588 NPUs or their CPU reference.

    import onnxruntime as ort, npuflow
    devices = npuflow.register(ort)                 # the EP's OrtEpDevice list
    so = ort.SessionOptions()
    so.add_provider_for_devices(devices, {"device": "host"})
    session = ort.InferenceSession("model.onnx", sess_options=so)
    npuflow.explain("model.onnx")                   # claims and refusals, as Python objects
"""

from importlib import metadata as _metadata

from ._library import cli_path, ep_library_path, ggml_backend_path
from ._session import EP_NAME, explain, register

__version__ = _metadata.version("npuflow")

__all__ = [
    "EP_NAME",
    "__version__",
    "cli_path",
    "ep_library_path",
    "explain",
    "ggml_backend_path",
    "register",
]
