#!/usr/bin/env python3
"""The portability check's own test (CTest streamkit_portability_coverage): all_kernels.cu includes
every public header, and the object compiled for each architecture holds machine code for exactly
that architecture and for every __global__ function declared under include/streamkit (read from the
object's .nv_fatbin with python/tools/fatbin_report.py, no cuobjdump needed). So a new header or a
new kernel that the portability translation unit does not reach fails CI.

    check_portability.py --include-dir include --source tests/portability/all_kernels.cu 75=obj75.o 80=obj80.o ...
"""

import argparse
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python" / "tools"))
import fatbin_report  # noqa: E402

KERNEL = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\s*\((?:[^()]|\([^()]*\))*\)\s*)?(\w+)\s*\(")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--include-dir", required=True, type=pathlib.Path)
    parser.add_argument("--source", required=True, type=pathlib.Path)
    parser.add_argument("--without", action="append", default=[],
                        help="a header folder left out of this build (e.g. distributed without MPI)")
    parser.add_argument("objects", nargs="+", help="ARCH=OBJECT for each architecture")
    args = parser.parse_args(argv)
    failures = []

    headers = sorted(p for p in args.include_dir.rglob("*") if p.suffix in (".hpp", ".cuh"))
    left_out = lambda p: any(f"/{folder}/" in p.as_posix() for folder in args.without)  # noqa: E731
    public = [p.relative_to(args.include_dir).as_posix() for p in headers if "/detail/" not in p.as_posix() and not left_out(p)]
    included = set(re.findall(r"#\s*include\s*<([^>]+)>", args.source.read_text()))
    for header in public:
        if header not in included:
            failures.append(f"{args.source.name} does not include the public header <{header}>")

    names = sorted({name for p in headers if not left_out(p) for name in KERNEL.findall(p.read_text())})
    if len(names) < 10:
        failures.append(f"found only {len(names)} __global__ functions in {args.include_dir}: is the pattern still right?")
    for item in args.objects:
        arch, _, path = item.partition("=")
        for one in path.split(";"):  # $<TARGET_OBJECTS> may list several
            entries = fatbin_report.fatbin_of(pathlib.Path(one).read_bytes())
            found_archs = sorted({a for kind, a, *_ in entries if kind == "SASS"})
            if found_archs != [int(arch)]:
                failures.append(f"{one}: machine code for {found_archs}, expected [{arch}]")
            if any(kind == "SASS" and payload is None for kind, _, _, _, payload in entries):
                failures.append(f"{one}: compressed machine code (build it with --compress-mode=none)")
            mangled = fatbin_report.kernels(entries, int(arch))
            missing = [name for name in names if not any(f"{len(name)}{name}" in m for m in mangled)]
            failures += [f"sm_{arch}: no instantiation of the kernel {name} in {pathlib.Path(one).name}" for name in missing]
            print(f"sm_{arch}: {len(mangled)} kernel instantiations, covering {len(names) - len(missing)} of the "
                  f"{len(names)} kernels of the headers")

    for failure in failures:
        print("FAIL:", failure)
    if not failures:
        print(f"portability: {len(public)} public headers included; {len(names)} kernels in every object")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
