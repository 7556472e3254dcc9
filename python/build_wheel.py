"""Assembles the npuflow wheel from a `cmake --install` tree and the package sources here.

The wheel it writes is tagged py3-none-linux_<machine> (no Python extension module: ONNX Runtime
and ggml load the native files by path, the console script runs the CLI); `auditwheel repair`
then vendors the non-system libraries (oneDNN, its OpenMP and OpenCL loaders) and retags it
manylinux (`make wheel`). Only the standard library is used, so no build backend is fetched.
"""

import argparse
import base64
import hashlib
import platform
import stat
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Files of the install tree that go into the package, by their path there.
NATIVE_FILES = {
    "bin/npuflow": "npuflow/bin/npuflow",
    "lib/libonnxruntime_npuflow.so": "npuflow/lib/libonnxruntime_npuflow.so",
    "lib/libggml-npuflow.so": "npuflow/lib/libggml-npuflow.so",
}
REQUIRES = ["onnxruntime>=1.23", "numpy"]


def metadata(version: str) -> str:
    lines = [
        "Metadata-Version: 2.1",
        "Name: npuflow",
        f"Version: {version}",
        "Summary: Transformer encoders and int8 MatMuls offloaded from ONNX Runtime and llama.cpp "
        "to edge NPUs (RK3588), with an exact CPU reference",
        "License: MIT",
        "Requires-Python: >=3.10",
        *[f"Requires-Dist: {requirement}" for requirement in REQUIRES],
        "Description-Content-Type: text/markdown",
        "",
        (HERE / "README.md").read_text(encoding="utf-8"),
    ]
    return "\n".join(lines)


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build(stage: Path, version: str, license_file: Path, out_dir: Path) -> Path:
    tag = f"py3-none-linux_{platform.machine()}"
    dist_info = f"npuflow-{version}.dist-info"
    entries: list[tuple[str, bytes, bool]] = []  # (name in the wheel, bytes, executable)
    for source in sorted((HERE / "npuflow").glob("*.py")):
        entries.append((f"npuflow/{source.name}", source.read_bytes(), False))
    for installed, packaged in NATIVE_FILES.items():
        path = stage / installed
        if not path.is_file():
            raise SystemExit(f"build_wheel: {path} is missing (run cmake --install first)")
        entries.append((packaged, path.read_bytes(), packaged.startswith("npuflow/bin/")))
    entries += [
        (f"{dist_info}/METADATA", metadata(version).encode(), False),
        (f"{dist_info}/WHEEL", (
            "Wheel-Version: 1.0\nGenerator: npuflow build_wheel.py\nRoot-Is-Purelib: false\n"
            f"Tag: {tag}\n").encode(), False),
        (f"{dist_info}/entry_points.txt", b"[console_scripts]\nnpuflow = npuflow._cli:main\n",
         False),
        (f"{dist_info}/top_level.txt", b"npuflow\n", False),
        (f"{dist_info}/licenses/LICENSE", license_file.read_bytes(), False),
    ]
    out_dir.mkdir(parents=True, exist_ok=True)
    wheel = out_dir / f"npuflow-{version}-{tag}.whl"
    record = [record_line(name, data) for name, data, _ in entries]
    record.append(f"{dist_info}/RECORD,,")
    entries.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode(), False))
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data, executable in entries:
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            mode = 0o755 if executable else 0o644
            info.external_attr = (stat.S_IFREG | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return wheel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stage", type=Path, required=True, help="cmake --install prefix")
    parser.add_argument("--version-file", type=Path, required=True)
    parser.add_argument("--license", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    version = args.version_file.read_text(encoding="utf-8").strip()
    print(build(args.stage, version, args.license, args.out))


if __name__ == "__main__":
    main()
