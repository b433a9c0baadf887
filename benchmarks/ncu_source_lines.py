#!/usr/bin/env python3
"""Where a kernel spends its instructions, by source line and by the function that holds the line.

  ncu -k regex:KERNEL -s S -c 1 --section SourceCounters -o rep BINARY ...
  ncu -i rep.ncu-rep --page source --csv --print-source sass > kernel_sass.csv
  nvdisasm -g -c BINARY.sm_90.cubin > all.sass            (the cubin from cuobjdump -xelf all BINARY; -lineinfo build)
  python3 benchmarks/ncu_source_lines.py kernel_sass.csv all.sass MANGLED_NAME [--top N] [--root REPO]

ncu's source page gives each SASS instruction's address and executed warp instructions; nvdisasm -g gives the
same kernel's instructions by offset with the source line each comes from (the innermost inlined one). The two are
joined by offset (address minus the kernel's first address). Either file may be gzipped. Lines are read from --root (default: this checkout),
which must hold the sources the binary was built from; each is credited to the function whose definition
precedes it in its file (the last line at column 0 that opens a parameter list).
"""
import argparse
import collections
import csv
import gzip
import re
from pathlib import Path


def read_text(path):
    return (gzip.open(path, "rt", errors="replace") if path.endswith(".gz") else open(path, errors="replace")).read()


def sass_lines(path, function):
    """{offset: (file, line)} of `function`'s instructions in an nvdisasm -g listing."""
    located, inside, where = {}, False, None
    for text in read_text(path).splitlines():
        if text.startswith(".text.") or text.startswith("//---") and ".text." in text:
            inside = text.startswith(f".text.{function}:")
            continue
        if not inside:
            continue
        m = re.match(r'\s*//## File "([^"]+)", line (\d+)', text)
        if m:
            where = (m.group(1), int(m.group(2)))
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/", text)
        if m:
            located[int(m.group(1), 16)] = where
    return located


def executed(path):
    """[(address, warp instructions executed)] from ncu's source page (SASS) of one kernel."""
    rows = list(csv.reader(read_text(path).splitlines()))
    header = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    column = rows[header].index("Instructions Executed")
    return [(int(r[0], 16), float(r[column] or 0)) for r in rows[header + 1:] if r and r[0].startswith("0x")]


def enclosing_function(source, line):
    for number in range(line - 1, -1, -1):
        text = source[number] if number < len(source) else ""
        if text[:1].strip() and not text.startswith(("//", "#", "}", "{")) and "(" in text:
            text = re.sub(r"__launch_bounds__\((?:[^()]|\([^()]*\))*\)", "", text)
            names = [n for n in re.findall(r"([A-Za-z_][A-Za-z0-9_:]*)\s*\(", text) if n not in ("alignas", "static_cast", "sizeof")]
            if not names and number + 1 < len(source):  # the name on the next line (after __launch_bounds__)
                names = re.findall(r"([A-Za-z_][A-Za-z0-9_:]*)\s*\(", source[number + 1])
            return names[0] if names else "?"
    return "?"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ncu_sass_csv")
    ap.add_argument("nvdisasm")
    ap.add_argument("function")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--root", default=str(Path(__file__).resolve().parents[1]))
    args = ap.parse_args()
    counts = executed(args.ncu_sass_csv)
    base = counts[0][0]
    located = sass_lines(args.nvdisasm, args.function)
    total = sum(c for _, c in counts)
    by_line, unmatched = collections.Counter(), 0.0
    for address, count in counts:
        where = located.get(address - base)
        if where is None:
            unmatched += count
        else:
            by_line[where] += count
    sources = {}

    def text_of(file):
        if file not in sources:
            local = Path(args.root) / "include" / file.split("/include/", 1)[1] if "/include/streamkit/" in file else Path(file)
            sources[file] = local.read_text().splitlines() if local.exists() else []
        return sources[file]

    by_function = collections.Counter()
    for (file, line), count in by_line.items():
        by_function[(Path(file).name, enclosing_function(text_of(file), line))] += count
    print(f"{total / 1e6:.1f} M warp instructions executed; {100 * unmatched / total:.1f} % at offsets without a source line")
    print("\n| function (file) | share |\n|---|---|")
    for (file, name), count in by_function.most_common(args.top):
        print(f"| {name} ({file}) | {100 * count / total:.1f} % |")
    print("\n| line | share | source |\n|---|---|---|")
    for (file, line), count in by_line.most_common(args.top):
        source = text_of(file)
        text = source[line - 1].strip() if 0 < line <= len(source) else ""
        text = text[:90].replace("|", "\\|")  # a Markdown table cell
        print(f"| {Path(file).name}:{line} | {100 * count / total:.1f} % | `{text}` |")


if __name__ == "__main__":
    main()
