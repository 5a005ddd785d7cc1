"""Shares of a worker's CPU from `py-spy record --format raw` files (collapsed stacks).

Record each worker process while a bench runs, then read the files together:

    py-spy record -p PID --gil -d 40 -r 200 --format raw --nonblocking -o w1.raw
    python -m bench.pyspy top w1.raw w2.raw                  # inclusive shares, top 60
    python -m bench.pyspy children "HttpTool.run" w1.raw     # what a frame spends on
    python -m bench.pyspy callers "Connection.execute (" w1.raw   # our code that calls it

A frame is matched by substring of `function (file)`; a share is the samples whose stack
holds it (first occurrence) over all samples. With `--gil` the samples are those that
held the GIL: the process's CPU in Python, the figure the notes quote.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

_FRAME = re.compile(r"(.*?) \((.*?):\d+\)$")
_PREFIXES = ("site-packages/", "/noetl_celery/")


def _name(frame: str) -> str:
    """`function (file)` without the line number and the install prefix."""
    match = _FRAME.match(frame)
    if not match:
        return frame
    function, path = match.groups()
    for prefix in _PREFIXES:
        if prefix in path:
            path = path.split(prefix, 1)[1]
            if prefix == "/noetl_celery/":
                path = "noetl_celery/" + path
            break
    return f"{function} ({path})"


def stacks(files: Iterable[Path]) -> Iterator[tuple[list[str], int]]:
    """(frames from the root, samples) per line of the raw files."""
    for file in files:
        for line in file.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if stack and count.isdigit():
                yield [_name(frame) for frame in stack.split(";")], int(count)


def inclusive(samples: Iterable[tuple[list[str], int]]) -> tuple[Counter[str], int]:
    """Samples per frame name (a frame counted once per stack), and the total."""
    shares: Counter[str] = Counter()
    total = 0
    for frames, count in samples:
        total += count
        for name in set(frames):
            shares[name] += count
    return shares, total


def _around(
    samples: Iterable[tuple[list[str], int]], target: str, key: Callable[[list[str], int], str]
) -> tuple[Counter[str], int]:
    """Samples per `key(frames, i)`, i the first frame matching `target`; the total."""
    counts: Counter[str] = Counter()
    total = 0
    for frames, count in samples:
        total += count
        for i, frame in enumerate(frames):
            if target in frame:
                counts[key(frames, i)] += count
                break
    return counts, total


def _callee(frames: list[str], i: int) -> str:
    return frames[i + 1] if i + 1 < len(frames) else "<self>"


def _our_caller(frames: list[str], i: int) -> str:
    ours = [f for f in frames[:i] if "noetl_celery/" in f]
    return ours[-1] if ours else "<none>"


def children(samples: Iterable[tuple[list[str], int]], target: str) -> tuple[Counter[str], int]:
    """Below the first frame matching `target`: samples per direct callee (`<self>` for
    the frame's own time), and the total of all samples."""
    return _around(samples, target, _callee)


def callers(samples: Iterable[tuple[list[str], int]], target: str) -> tuple[Counter[str], int]:
    """Above the first frame matching `target`: samples per nearest frame of our own
    package (`<none>` when no frame of ours calls it), and the total."""
    return _around(samples, target, _our_caller)


def _print(counts: Counter[str], total: int, limit: int) -> None:
    print(f"{total} samples")
    for name, count in counts.most_common(limit):
        print(f"{100 * count / max(total, 1):6.2f}%  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("top", "children", "callers"))
    parser.add_argument("args", nargs="+", help="[FRAME] FILE...")
    parser.add_argument("--limit", type=int, default=60)
    ns = parser.parse_args()
    missing = [f for f in ns.args[ns.mode != "top" :] if not Path(f).is_file()]
    if missing:
        parser.error(f"no such py-spy raw file: {', '.join(missing)}")
    if ns.mode == "top":
        counts, total = inclusive(stacks(Path(f) for f in ns.args))
    else:
        target, *files = ns.args
        if not files:
            parser.error(f"{ns.mode} needs a frame and at least one file")
        pick = children if ns.mode == "children" else callers
        counts, total = pick(stacks(Path(f) for f in files), target)
    _print(counts, total, ns.limit)


if __name__ == "__main__":
    main()
