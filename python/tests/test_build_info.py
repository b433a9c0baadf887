"""streamkit.build_info() and the decision whether a build runs on a GPU (python/src/architectures.hpp),
on the host: the compute capabilities of real GPUs against the binary wheel's architectures and a
default source build's, the error's text and type, and that build_info() tells the truth about the
machine code in the installed extension (read from its .nv_fatbin, without the CUDA Toolkit). The
check on a real device is at the end (skipped without a GPU)."""

import os
import pathlib
import re
import sys

import pytest

import streamkit
from streamkit import _streamkit

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tools"))
import fatbin_report  # noqa: E402  (python/tools, beside the tests)

WHEEL_SASS = ["75", "80", "86", "89", "90", "100", "120"]
WHEEL_PTX = ["120"]
SOURCE_DEFAULT = (["90"], ["90"])  # CMAKE_CUDA_ARCHITECTURES=90


def runs(capability, sass, ptx):
    return _streamkit._architecture_support(capability[0], capability[1], sass, ptx)


@pytest.mark.parametrize("capability, expected", [
    ((7, 5), "sm_75 machine code"),    # T4, RTX 20
    ((8, 0), "sm_80 machine code"),    # A100
    ((8, 6), "sm_86 machine code"),    # A10, RTX 30
    ((8, 7), "sm_86 machine code"),    # Orin: 8.6 code runs on 8.7
    ((8, 9), "sm_89 machine code"),    # L4, L40, RTX 40
    ((9, 0), "sm_90 machine code"),    # H100, H200
    ((10, 0), "sm_100 machine code"),  # B200
    ((10, 3), "sm_100 machine code"),  # B300
    ((12, 0), "sm_120 machine code"),  # RTX 50, RTX PRO 6000
    ((12, 1), "sm_120 machine code"),
    ((13, 0), "compute_120 PTX, compiled by the driver at first use"),  # a future GPU
])
def test_the_wheel_runs_on_every_current_gpu_and_a_future_one(capability, expected):
    assert runs(capability, WHEEL_SASS, WHEEL_PTX) == expected


@pytest.mark.parametrize("capability", [(6, 1), (7, 0), (7, 2), (11, 0)])
def test_the_wheel_does_not_run_on_older_gpus_nor_on_an_architecture_between_its_own(capability):
    # 11.0 (Thor): newer than sm_100's major revision, older than compute_120's PTX.
    assert runs(capability, WHEEL_SASS, WHEEL_PTX) is None


@pytest.mark.parametrize("capability, expected", [
    ((9, 0), "sm_90 machine code"),
    ((10, 0), "compute_90 PTX, compiled by the driver at first use"),
    ((12, 0), "compute_90 PTX, compiled by the driver at first use"),
    ((8, 0), None),
    ((8, 9), None),
    ((7, 5), None),
])
def test_a_default_source_build_runs_on_hopper_and_by_ptx_on_newer_gpus(capability, expected):
    assert runs(capability, *SOURCE_DEFAULT) == expected


def test_the_newest_machine_code_that_runs_is_picked_and_machine_code_before_ptx():
    assert runs((8, 9), ["80", "86"], ["80"]) == "sm_86 machine code"
    assert runs((8, 6), ["80", "89"], []) == "sm_80 machine code"
    assert runs((9, 0), ["80"], ["75", "86"]) == "compute_86 PTX, compiled by the driver at first use"


def test_arch_and_family_specific_code_runs_only_where_its_chip_or_family_does():
    assert runs((9, 0), ["90a"], []) == "sm_90a machine code"
    assert runs((10, 0), ["90a"], ["90a"]) is None  # arch-specific PTX is not compiled forward
    assert runs((10, 3), ["100f"], []) == "sm_100f machine code"
    assert runs((12, 0), ["100f"], ["100f"]) is None
    assert runs((9, 0), ["sm_90", "nine", ""], []) is None  # names it does not understand count for nothing


def test_the_error_names_the_device_its_capability_and_the_builds_architectures():
    message = _streamkit._unsupported_message("CUDA device 1 (Tesla V100-SXM2-32GB)", 7, 0, WHEEL_SASS, WHEEL_PTX)
    assert "CUDA device 1 (Tesla V100-SXM2-32GB)" in message
    assert "compute capability is 7.0" in message
    assert "sm_75, sm_80, sm_86, sm_89, sm_90, sm_100 and sm_120" in message
    assert "PTX for compute_120" in message
    assert "7.5 and newer" in message  # CUDA 13 cannot build for it at all
    message = _streamkit._unsupported_message("CUDA device 0 (NVIDIA A100-SXM4-80GB)", 8, 0, *SOURCE_DEFAULT)
    assert "compute capability is 8.0" in message and "machine code for sm_90 and PTX for compute_90" in message
    assert "CMAKE_CUDA_ARCHITECTURES=native" in message  # how to get a build that runs there
    assert "invalid device function" not in message.lower()


def test_the_error_is_a_cuda_error_with_the_missing_kernel_image_code():
    with pytest.raises(streamkit.CudaError, match="^streamkit cannot run on test$") as caught:
        _streamkit._raise_unsupported_device("streamkit cannot run on test")
    assert caught.value.code == 209
    assert caught.value.name == "cudaErrorNoKernelImageForDevice"
    assert isinstance(caught.value, RuntimeError)


def cmake_architectures(text):
    """(sass, ptx) of a CMAKE_CUDA_ARCHITECTURES value, as CMake reads it."""
    sass, ptx = [], []
    for item in text.split(";"):
        name, _, kind = item.partition("-")
        if kind != "virtual":
            sass.append(name)
        if kind != "real":
            ptx.append(name)
    return sass, ptx


def test_build_info_describes_the_build():
    info = streamkit.build_info()
    assert set(info) == {"version", "cuda_architectures", "sass", "ptx", "cuda_version", "cuda_runtime", "cuda_compiler",
                         "host_compiler", "wheel"}
    assert info["version"] == streamkit.__version__
    sass, ptx = cmake_architectures(info["cuda_architectures"])
    assert info["sass"] == ["sm_" + a for a in sass]
    assert info["ptx"] == ["compute_" + a for a in ptx]
    assert re.fullmatch(r"\d+\.\d+", info["cuda_version"]), info
    assert info["cuda_runtime"] == "static"
    assert info["cuda_compiler"].startswith("NVIDIA "), info
    assert info["host_compiler"].split()[0] in ("GNU", "Clang"), info
    info["sass"].append("sm_0")  # a new dict every call
    assert "sm_0" not in streamkit.build_info()["sass"]


def test_build_info_matches_the_machine_code_in_the_extension():
    info = streamkit.build_info()
    numbers = lambda names: ",".join(name.split("_")[1] for name in names)  # noqa: E731
    fatbin_report.main([_streamkit.__file__, "--kernels", "0", "--expect-sass", numbers(info["sass"]),
                        "--expect-ptx", numbers(info["ptx"])])


@pytest.mark.skipif("STREAMKIT_EXPECT_ARCHITECTURES" not in os.environ,
                    reason="STREAMKIT_EXPECT_ARCHITECTURES is not set (CI sets it to the wheel's architectures)")
def test_the_installed_build_is_the_one_expected():
    info = streamkit.build_info()
    assert info["cuda_architectures"] == os.environ["STREAMKIT_EXPECT_ARCHITECTURES"]
    assert info["wheel"] is True


@pytest.mark.skipif(streamkit.device_count() == 0, reason="no CUDA device visible (streamkit.device_count() == 0)")
def test_on_this_gpu_the_driver_loads_the_code_the_decision_names():
    how = _streamkit._device_support(0)
    decided = how.split(" (")[0]
    loaded = re.search(r"the driver loaded sm_(\d+) code compiled from compute_(\d+)", how)
    assert loaded, how
    if decided.endswith("machine code"):
        assert decided == f"sm_{loaded.group(1)} machine code", how
    else:
        assert decided.startswith(f"compute_{loaded.group(2)} PTX"), how


@pytest.mark.skipif(streamkit.device_count() == 0, reason="no CUDA device visible (streamkit.device_count() == 0)")
def test_on_this_gpu_a_build_without_its_architecture_raises_the_clear_error():
    with pytest.raises(streamkit.CudaError, match=r"compute capability is \d+\.\d+.*machine code for sm_61") as caught:
        _streamkit._device_support(0, sass=["61"], ptx=[])
    assert caught.value.name == "cudaErrorNoKernelImageForDevice"
    assert "CUDA device 0 (" in str(caught.value)
