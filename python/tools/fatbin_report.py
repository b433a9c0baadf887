#!/usr/bin/env python3
"""Where the size of streamkit's compiled extension goes, without the CUDA toolkit's cuobjdump.

Reads an ELF shared object (the extension, or the one inside a wheel), lists its largest sections,
and parses the CUDA fat binary (.nv_fatbin): for each architecture, the machine code (SASS, ELF
entries) and PTX it carries, stored (as nvcc compressed it) and uncompressed. With --expect-sass /
--expect-ptx it fails unless the architectures found are exactly those (CI compares them with
streamkit.build_info()).

    python3 python/tools/fatbin_report.py dist/streamkit-*.whl
    python3 python/tools/fatbin_report.py _streamkit.so --expect-sass 75,80,86,89,90,100,120 --expect-ptx 120

The fat binary layout (a 16-byte container header with magic 0xBA55ED50, then entries of a 64-, 80-
or 112-byte header and an 8-byte-aligned payload) is NVIDIA's undocumented format, as cuobjdump
reads it; an entry that does not parse stops the report with an error rather than a wrong table.
"""

from __future__ import annotations

import argparse
import collections
import io
import struct
import subprocess
import sys
import zipfile

FATBIN_MAGIC = 0xBA55ED50
KINDS = {1: "PTX", 2: "SASS", 16: "SASS"}
COMPRESSED = 0x8000  # flag of an entry whose payload nvcc compressed


def elf_sections(data):
    """{name: (offset, size)} of a little-endian ELF64 file."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a little-endian 64-bit ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_offset = headers[shstrndx][4]
    sections = {}
    for name, kind, _flags, _addr, offset, size, *_ in headers:
        end = data.index(b"\0", names_offset + name)
        sections[data[names_offset + name:end].decode()] = (offset, size if kind != 8 else 0)  # NOBITS: no bytes
    return sections


def fatbin_entries(blob):
    """(kind, arch, stored bytes, uncompressed bytes, payload or None) of every entry of every
    container in `blob`; the payload (a cubin) only for uncompressed machine code."""
    entries = []
    position = 0
    while position + 16 <= len(blob):
        magic, _version, header_size, fat_size = struct.unpack_from("<IHHQ", blob, position)
        if magic != FATBIN_MAGIC:
            position += 8  # containers are 8-byte aligned; padding between them
            continue
        entry = position + header_size
        end = position + header_size + fat_size
        if end > len(blob):
            raise ValueError(f"fat binary container at {position:#x} runs past the section")
        while entry < end:
            kind, _, entry_header, padded = struct.unpack_from("<HHIQ", blob, entry)
            compressed_size, = struct.unpack_from("<I", blob, entry + 16)
            arch, = struct.unpack_from("<I", blob, entry + 28)
            flags, uncompressed = struct.unpack_from("<QQ", blob, entry + 40)[0], struct.unpack_from("<Q", blob, entry + 56)[0]
            compressed = bool(flags & COMPRESSED)
            stored = compressed_size if compressed else padded
            if entry_header < 64 or padded < stored or kind not in KINDS or (compressed and uncompressed == 0):
                raise ValueError(f"unexpected fat binary entry at {entry:#x} (kind {kind}, header {entry_header})")
            payload = None if compressed or KINDS[kind] != "SASS" else blob[entry + entry_header:entry + entry_header + padded]
            entries.append((KINDS[kind], arch, stored, uncompressed if compressed else stored, payload))
            entry += entry_header + padded
        position = (end + 7) // 8 * 8
    return entries


def kernels(entries, arch):
    """{mangled kernel name: machine-code bytes} of the (uncompressed) cubins for `arch`."""
    mangled = collections.Counter()
    for kind, entry_arch, _, _, payload in entries:
        if kind == "SASS" and entry_arch == arch and payload is not None and payload[:4] == b"\x7fELF":
            for section, (_, size) in elf_sections(payload).items():
                if section.startswith(".text."):
                    mangled[section[len(".text."):]] += size
    return mangled


def kernel_sizes(entries, arch):
    """{kernel name without template arguments: machine-code bytes} of the cubins for `arch`."""
    mangled = kernels(entries, arch)
    names = list(mangled)
    try:  # c++filt (binutils) when present; the mangled names otherwise
        demangled = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                                   check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        demangled = names
    sizes = collections.Counter()
    for name, readable in zip(names, demangled):
        base = readable.split("(")[0]
        base = base.split("<")[0] if "<" in base else base
        sizes[base.replace("void ", "")] += mangled[name]
    return sizes


def fatbin_of(data):
    """The entries of the .nv_fatbin section of the ELF file `data` (a shared object or an object file)."""
    sections = elf_sections(data)
    if ".nv_fatbin" not in sections:
        raise ValueError("no .nv_fatbin section")
    offset, size = sections[".nv_fatbin"]
    return fatbin_entries(data[offset:offset + size])


def read_shared_object(path):
    """The bytes of `path`, or of the extension module inside it when it is a wheel."""
    if path.endswith(".whl"):
        with zipfile.ZipFile(path) as wheel:
            names = [n for n in wheel.namelist() if "/_streamkit." in n and n.endswith(".so")]
            if len(names) != 1:
                raise ValueError(f"{path}: expected one streamkit/_streamkit*.so, found {names}")
            return names[0], wheel.read(names[0])
    with open(path, "rb") as f:
        return path, f.read()


def mib(n):
    return f"{n / 2**20:8.2f} MiB"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", help="a wheel or an ELF shared object")
    parser.add_argument("--expect-sass", help="comma-separated architectures, e.g. 75,80,90")
    parser.add_argument("--expect-ptx", help="comma-separated architectures, e.g. 120")
    parser.add_argument("--kernels", type=int, default=90, metavar="ARCH",
                        help="list the machine code of this architecture by kernel (default 90; 0: none)")
    args = parser.parse_args(argv)

    out = io.StringIO()
    if args.path.endswith(".whl"):
        import os

        out.write(f"wheel {args.path}: {mib(os.path.getsize(args.path))} (compressed)\n")
    name, data = read_shared_object(args.path)
    sections = elf_sections(data)
    out.write(f"{name}: {mib(len(data))}\n  largest sections:\n")
    for section, (_, size) in sorted(sections.items(), key=lambda item: -item[1][1])[:6]:
        out.write(f"    {section:<16} {mib(size)}\n")
    if ".nv_fatbin" not in sections:
        raise SystemExit(f"{name}: no .nv_fatbin section")
    entries = fatbin_of(data)
    totals = collections.defaultdict(lambda: [0, 0, 0])
    for kind, arch, stored, uncompressed, _ in entries:
        t = totals[(kind, arch)]
        t[0] += 1
        t[1] += stored
        t[2] += uncompressed
    out.write("  .nv_fatbin by architecture (stored = as embedded; nvcc compresses some entries):\n")
    out.write(f"    {'code':<14}{'entries':>8}{'stored':>15}{'uncompressed':>17}\n")
    for (kind, arch), (count, stored, uncompressed) in sorted(totals.items(), key=lambda item: (item[0][1], item[0][0])):
        label = f"sm_{arch} SASS" if kind == "SASS" else f"compute_{arch} PTX"
        out.write(f"    {label:<14}{count:>8}{mib(stored):>15}{mib(uncompressed):>17}\n")
    stored_total = sum(t[1] for t in totals.values())
    out.write(f"    {'total':<14}{len(entries):>8}{mib(stored_total):>15}{mib(sum(t[2] for t in totals.values())):>17}\n")
    if args.kernels:
        sizes = kernel_sizes(entries, args.kernels)
        if sizes:
            out.write(f"  sm_{args.kernels} machine code by kernel (all instantiations of each):\n")
            for kernel, size in sizes.most_common(12):
                out.write(f"    {kernel:<48}{mib(size)}\n")
    sys.stdout.write(out.getvalue())

    found = {kind: sorted({a for k, a, *_ in entries if k == kind}) for kind in ("SASS", "PTX")}
    failures = []
    for kind, expected in (("SASS", args.expect_sass), ("PTX", args.expect_ptx)):
        if expected is not None:
            want = sorted(int(a) for a in expected.split(",") if a)
            if want != found[kind]:
                failures.append(f"{kind}: expected {want}, found {found[kind]}")
    if failures:
        raise SystemExit(f"{name}: architectures differ: " + "; ".join(failures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
